"""The A2A 1.0 error bodies: ``google.rpc.Status`` with an ``ErrorInfo`` (domain
``a2a-protocol.org``, ``reason`` the error's name in UPPER_SNAKE_CASE) and, for invalid
fields, a ``BadRequest``; the HTTP+JSON binding's body, the JSON-RPC error's ``data`` and the
gRPC status's details alike."""

from __future__ import annotations

import re
from typing import Any

from gateway.errors import GatewayError

__all__ = ["jsonrpc_error_v1", "reason", "rpc_status"]

_DOMAIN = "a2a-protocol.org"
_GRPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    421: "PERMISSION_DENIED",
    431: "INVALID_ARGUMENT",
    501: "UNIMPLEMENTED",
    502: "INTERNAL",
    503: "UNAVAILABLE",
}
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def reason(exc: GatewayError) -> str:
    """The ``ErrorInfo.reason`` of an error: its name in UPPER_SNAKE_CASE, without
    ``Error`` (``TaskNotFoundError`` → ``TASK_NOT_FOUND``)."""
    if exc.name == "InternalError":
        return "INTERNAL_ERROR"
    return _WORD.sub("_", exc.name.removesuffix("Error")).upper()


def _error_info(exc: GatewayError) -> dict[str, Any]:
    info: dict[str, Any] = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason(exc),
        "domain": _DOMAIN,
    }
    # ErrorInfo.metadata is a map of strings: only the scalar facts of the error's data.
    facts = {
        k: str(v) for k, v in (exc.data or {}).items() if isinstance(v, str | int | float | bool)
    }
    if facts:
        info["metadata"] = facts
    return info


def rpc_status(exc: GatewayError) -> dict[str, Any]:
    """The 1.0 HTTP+JSON error body: ``google.rpc.Status`` with an ``ErrorInfo``."""
    details: list[dict[str, Any]] = [_error_info(exc)]
    errors = (exc.data or {}).get("errors")
    if isinstance(errors, list):
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [
                    {"field": str(e.get("field", "")), "description": str(e.get("reason", ""))}
                    for e in errors
                    if isinstance(e, dict)
                ],
            }
        )
    return {
        "error": {
            "code": exc.status,
            "status": _GRPC_STATUS.get(exc.status, "INTERNAL"),
            "message": exc.message,
            "details": details,
        }
    }


def jsonrpc_error_v1(exc: GatewayError) -> dict[str, Any]:
    """The 1.0 JSON-RPC error object: ``data`` is a list of ``Any`` details."""
    return {
        "code": exc.code,
        "message": exc.message,
        "data": rpc_status(exc)["error"]["details"],
    }
