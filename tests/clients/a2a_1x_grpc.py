"""How the a2a-sdk 1.x scenarios make their clients: the binding a MODE names, and for
``grpc`` a channel factory whose channels send the API key as call metadata (an
interceptor, as an application adds its credentials to every call)."""

from __future__ import annotations

from typing import Any

import grpc
from a2a.client import ClientConfig

BINDINGS = {"rest": "HTTP+JSON", "grpc": "GRPC"}


def _with_key(details: Any, key: str) -> Any:
    metadata = grpc.aio.Metadata(*tuple(details.metadata or ()))
    metadata.add("authorization", f"Bearer {key}")
    return details._replace(metadata=metadata)


# One interceptor per kind of call: a channel files each under the first kind it is.
class _UnaryKey(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, key: str) -> None:
        self.key = key

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_key(details, self.key), request)


class _StreamKey(grpc.aio.UnaryStreamClientInterceptor):
    def __init__(self, key: str) -> None:
        self.key = key

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_key(details, self.key), request)


def binding(mode: str) -> str:
    return BINDINGS.get(mode.removeprefix("compat-"), "JSONRPC")


def client_config(http: Any, key: str, mode: str, **options: Any) -> ClientConfig:
    """A ClientConfig for MODE's binding (``http`` carries the key for the HTTP ones)."""
    config = ClientConfig(httpx_client=http, supported_protocol_bindings=[binding(mode)], **options)
    if mode == "grpc":
        config.grpc_channel_factory = lambda url: grpc.aio.insecure_channel(
            url, interceptors=[_UnaryKey(key), _StreamKey(key)]
        )
    return config


def transport_name(client: Any) -> str:
    """The client's transport's class (a tenant decorator's inner one: a card's interface
    with a ``tenant`` is served through one)."""
    transport = client._transport
    return type(getattr(transport, "_base", transport)).__name__
