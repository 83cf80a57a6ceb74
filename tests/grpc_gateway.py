"""A served gateway with its gRPC binding (``A2AService`` of the A2A 1.0 proto), and the
calls the gRPC tests make to it with grpcio directly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import grpc
import orjson
import pytest
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from gateway.embedded_redis import free_port
from gateway.grpcapi.proto import a2a_pb2 as pb
from tests.conftest import API_KEYS
from tests.processes import serving

SERVICE = "/lf.a2a.v1.A2AService/"


@dataclass
class Served:
    base: str
    grpc: str
    channel: Any  # a grpc channel


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    port = free_port()
    with (
        serving(
            tmp_path_factory.mktemp("grpc"),
            GATEWAY_API_KEYS=orjson.dumps(API_KEYS).decode(),
            GATEWAY_GRPC_PORT=str(port),
            GATEWAY_PUSH_ALLOWLIST="127.0.0.1",
            GATEWAY_RATE_LIMIT_TENANTS='{"t2": {"user": "3/3600"}}',
        ) as (_, base),
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        grpc.channel_ready_future(channel).result(timeout=60)
        yield Served(base, f"127.0.0.1:{port}", channel)


def call(
    served: Served,
    method: str,
    request: Message,
    reply: type[Message],
    key: str | None = "key-alice",
    **metadata: str,
) -> Any:
    stub = served.channel.unary_unary(
        SERVICE + method,
        request_serializer=request.SerializeToString,
        response_deserializer=reply.FromString,
    )
    pairs = [*([("authorization", f"Bearer {key}")] if key else []), *metadata.items()]
    return stub(request, metadata=pairs, timeout=60)


def send_request(
    *parts: dict[str, Any], metadata: dict[str, Any] | None = None, **fields: Any
) -> pb.SendMessageRequest:
    """``metadata``: the message's (the echo agent's instructions)."""
    message = {
        "role": "ROLE_USER",
        "messageId": str(uuid.uuid4()),
        "parts": list(parts) or [{"text": "hello"}],
        **({"metadata": metadata} if metadata else {}),
    }
    body = {"message": message, **fields}
    return ParseDict(body, pb.SendMessageRequest())


def send(served: Served, *parts: dict[str, Any], key: str = "key-alice", **fields: Any) -> Any:
    reply = call(served, "SendMessage", send_request(*parts, **fields), pb.SendMessageResponse, key)
    return MessageToDict(reply)["task"]


def refusal(exc: grpc.RpcError) -> tuple[grpc.StatusCode, dict[str, Any]]:
    """The status code and the ``google.rpc.Status`` details, by type name."""
    failed = cast(grpc.Call, exc)
    trailers: dict[str, Any] = dict(failed.trailing_metadata() or ())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    details: dict[str, Any] = {}
    for detail in status.details:
        for kind in (
            error_details_pb2.ErrorInfo,
            error_details_pb2.BadRequest,
            error_details_pb2.RetryInfo,
        ):
            if detail.Is(kind.DESCRIPTOR):
                unpacked = kind()
                detail.Unpack(unpacked)
                details[kind.__name__] = MessageToDict(unpacked)
    return failed.code(), details


def refused(served: Served, method: str, request: Message, reply: type[Message], **kw: Any) -> Any:
    with pytest.raises(grpc.RpcError) as caught:
        call(served, method, request, reply, **kw)
    return refusal(caught.value)
