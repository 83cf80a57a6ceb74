"""Errors of the gRPC binding: the one error table's errors (``gateway.errors``) as a gRPC
status code and a ``google.rpc.Status`` in the ``grpc-status-details-bin`` trailer.

The details are the 1.0 HTTP+JSON binding's (``dialects.rpc_status``): an ``ErrorInfo``
(domain ``a2a-protocol.org``, ``reason`` the A2A error's name in UPPER_SNAKE_CASE) and, for
invalid fields, a ``BadRequest``; a rate limit adds a ``RetryInfo``. The code is the one
A2A 1.0 maps the error to (specification §5.4), else the one of its HTTP status."""

from __future__ import annotations

import grpc
from google.protobuf import duration_pb2
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from gateway.dialects import rpc_status
from gateway.errors import GatewayError, RateLimitedError

__all__ = ["DETAILS_KEY", "grpc_error"]

DETAILS_KEY = "grpc-status-details-bin"
# A2A 1.0 §5.4: the errors whose gRPC code is not the one of their HTTP status.
_BY_NAME = {
    "TaskNotCancelableError": grpc.StatusCode.FAILED_PRECONDITION,
    "PushNotificationNotSupportedError": grpc.StatusCode.FAILED_PRECONDITION,
    "UnsupportedOperationError": grpc.StatusCode.FAILED_PRECONDITION,
    "ExtendedAgentCardNotConfiguredError": grpc.StatusCode.FAILED_PRECONDITION,
    "VersionNotSupportedError": grpc.StatusCode.FAILED_PRECONDITION,
    "InvalidAgentResponseError": grpc.StatusCode.INTERNAL,
}
_BY_STATUS = {429: grpc.StatusCode.RESOURCE_EXHAUSTED}
# The details ``rpc_status`` writes, by their type's name.
_DETAILS: dict[str, type[Message]] = {
    "ErrorInfo": error_details_pb2.ErrorInfo,
    "BadRequest": error_details_pb2.BadRequest,
}


def _code(exc: GatewayError, named: str) -> grpc.StatusCode:
    code = _BY_NAME.get(exc.name) or _BY_STATUS.get(exc.status)
    if code is None:
        code = getattr(grpc.StatusCode, named, grpc.StatusCode.INTERNAL)
    return code


def grpc_error(exc: GatewayError) -> tuple[grpc.StatusCode, str, bytes]:
    """The error's code, message and serialized ``google.rpc.Status``."""
    body = rpc_status(exc)["error"]
    code = _code(exc, body["status"])
    status = status_pb2.Status(code=code.value[0], message=exc.message)
    details: list[Message] = [
        ParseDict(
            {k: v for k, v in detail.items() if k != "@type"},
            _DETAILS[detail["@type"].rpartition(".")[2]](),
        )
        for detail in body["details"]
    ]
    if isinstance(exc, RateLimitedError):
        delay = duration_pb2.Duration(seconds=exc.retry_after)
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    for detail in details:
        packed = AnyProto()
        packed.Pack(detail)
        status.details.append(packed)
    return code, exc.message, status.SerializeToString()
