"""The transport floor's server (``bench.bindings``): an empty uvicorn/Starlette POST endpoint
and an empty grpcio asyncio unary handler, served by one process on one event loop as the
gateway serves its HTTP and gRPC bindings. Each reads its request and answers a few bytes,
nothing else: what a call costs the server before any gateway code runs.

``python -m bench.empty_endpoints HTTP_PORT GRPC_PORT``; ``GET /healthz`` answers once both
serve.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

SERVICE, METHOD = "bench.Empty", "Call"
_ANSWER = b'{"task":{}}'


async def _post(request: Request) -> Response:
    await request.body()
    return Response(_ANSWER, media_type="application/json")


async def _healthz(request: Request) -> Response:
    return Response(b"ok")


async def _unary(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    return _ANSWER  # no (de)serializers: the bytes as they come and go


def app(grpc_port: int) -> Starlette:
    """The HTTP endpoints, with the gRPC server started in their lifespan."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        server = grpc.aio.server()
        handler: grpc.RpcMethodHandler[bytes, bytes] = grpc.unary_unary_rpc_method_handler(_unary)
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {METHOD: handler}),)
        )
        server.add_insecure_port(f"127.0.0.1:{grpc_port}")
        await server.start()
        yield
        await server.stop(0)

    routes = [Route("/", _post, methods=["POST"]), Route("/healthz", _healthz)]
    return Starlette(routes=routes, lifespan=lifespan)


if __name__ == "__main__":
    http_port, grpc_port = int(sys.argv[1]), int(sys.argv[2])
    uvicorn.run(app(grpc_port), host="127.0.0.1", port=http_port, log_level="warning", ws="none")
