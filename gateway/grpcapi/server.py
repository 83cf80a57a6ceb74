"""The gRPC server of `gateway serve`: grpcio's asyncio server on ``GATEWAY_GRPC_PORT``
(bound to ``GATEWAY_HOST``), in the same event loop and process as the HTTP bindings. It
serves ``A2AService``, the standard health service (``grpc.health.v1``: SERVING while the
gateway serves) and server reflection (so ``grpcurl`` needs no proto file). TLS when
``GATEWAY_GRPC_TLS_CERT`` and ``GATEWAY_GRPC_TLS_KEY`` name a PEM chain and key, else
plaintext. grpcio binds with ``SO_REUSEPORT``: every process of ``GATEWAY_PROCESSES`` serves
the one port, as they do the HTTP port."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from gateway.grpcapi.edge import Edge
from gateway.grpcapi.service import SERVICE, a2a_handler
from gateway.settings import Settings

__all__ = ["GrpcServer", "grpc_serving"]

log = logging.getLogger("gateway")

# HTTP/2 pings keep idle streams' connections open through proxies and find dead peers.
_OPTIONS = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
)


def _credentials(settings: Settings) -> grpc.ServerCredentials | None:
    cert, key = settings.grpc_tls_cert, settings.grpc_tls_key
    if (cert is None) != (key is None):
        raise ValueError("GATEWAY_GRPC_TLS_CERT and GATEWAY_GRPC_TLS_KEY go together")
    if cert is None or key is None:
        return None
    return grpc.ssl_server_credentials([(Path(key).read_bytes(), Path(cert).read_bytes())])


class GrpcServer:
    def __init__(self, settings: Settings, edge: Edge) -> None:
        self._settings = settings
        # A request as large as an HTTP body may be (GATEWAY_MAX_BODY_BYTES), no larger.
        limit = ("grpc.max_receive_message_length", settings.max_body_bytes)
        self._server = grpc.aio.server(options=(*_OPTIONS, limit))
        self._health = health.aio.HealthServicer()
        self._server.add_generic_rpc_handlers((a2a_handler(edge),))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection(
            (SERVICE.full_name, health.SERVICE_NAME, reflection.SERVICE_NAME), self._server
        )
        host = settings.host if ":" not in settings.host else f"[{settings.host}]"
        address = f"{host}:{settings.grpc_port}"
        credentials = _credentials(settings)
        self._tls = credentials is not None
        if credentials is None:
            self.port = self._server.add_insecure_port(address)
        else:
            self.port = self._server.add_secure_port(address, credentials)

    async def start(self) -> None:
        await self._server.start()
        log.info("grpc serving", extra={"port": self.port, "tls": self._tls})
        for name in ("", SERVICE.full_name):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace: float) -> None:
        """Health turns NOT_SERVING, calls under way get ``grace`` seconds to end."""
        await self._health.enter_graceful_shutdown()
        await self._server.stop(grace)


@contextlib.asynccontextmanager
async def grpc_serving(settings: Settings, edge: Edge) -> AsyncIterator[GrpcServer | None]:
    """The gRPC server while in the block, when ``GATEWAY_GRPC_PORT`` is set; leaving, its
    streams end first (their clients resubscribe elsewhere), then it stops."""
    if settings.grpc_port is None:
        yield None
        return
    server = GrpcServer(settings, edge)
    await server.start()
    try:
        yield server
    finally:
        edge.state.streams.close()
        await server.stop(settings.shutdown_grace_seconds)
