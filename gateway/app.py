"""The ASGI application: HTTP in front of a runtime (store, engine, services).

The app factory of a served process, above ``gateway.http``: a runtime and its services, as
the composition root (``gateway.runtime``) builds them, with the HTTP routes and middleware
in front."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from wsgiref.simple_server import WSGIServer

from mcp.server.mcpserver import MCPServer
from prometheus_client import start_http_server
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute

from gateway import tracing
from gateway.agents.base import Agent
from gateway.audit.log import AuditLog
from gateway.grpcapi.edge import Edge
from gateway.grpcapi.server import grpc_serving
from gateway.http.a2a_rest import proto_rest_routes
from gateway.http.access_log import AccessLogMiddleware
from gateway.http.audit import AuditMiddleware
from gateway.http.auth import Authenticator, AuthMiddleware
from gateway.http.browser import BrowserGuardMiddleware, HostRule
from gateway.http.errors import EXCEPTION_HANDLERS
from gateway.http.jsonrpc import jsonrpc_routes
from gateway.http.limits import BodyLimitMiddleware
from gateway.http.mcp import mcp_endpoint
from gateway.http.memories import memory_routes
from gateway.http.ratelimit import RateLimiter, RateLimitMiddleware
from gateway.http.router import IndexedRouter
from gateway.http.routes import (
    agent_routes,
    audit_routes,
    key_routes,
    operational_routes,
    registry_routes,
)
from gateway.http.stack import GatewayStarlette
from gateway.http.state import AppState
from gateway.identity.managed import ManagedKeys
from gateway.identity.tokens import TokenVerifier
from gateway.runtime.runtime import Runtime
from gateway.runtime.services import Services
from gateway.settings import Settings

__all__ = ["create_app"]

log = logging.getLogger("gateway")


def _cors(origins: list[str]) -> list[Middleware]:
    """CORS for the configured origins only (preflights answered before authentication);
    none configured: no CORS headers, so browsers keep other sites' pages out."""
    if not origins:
        return []
    return [
        Middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=[
                "Authorization",
                "X-API-Key",
                "Content-Type",
                "Tenant-Name",
                "X-Request-Id",
            ],
            expose_headers=["X-Request-Id", "Location", "Retry-After", "WWW-Authenticate"],
        )
    ]


def _metrics_server(settings: Settings) -> WSGIServer | None:
    """With ``GATEWAY_METRICS_PORT``, /metrics is served on that port (a thread, as in
    ``gateway worker``) and not on the API's."""
    if settings.metrics_port is None:
        return None
    server, _ = start_http_server(settings.metrics_port, addr=settings.host)
    return server


def _stop_metrics_server(server: WSGIServer) -> None:
    server.shutdown()
    server.server_close()


def _state(
    settings: Settings, runtime: Runtime, services: Services, redis_embedded: bool
) -> AppState:
    """What the routes share: the runtime's parts and the services over them."""
    return AppState(
        settings=settings,
        store=runtime.store,
        agents=runtime.agents,
        messages=services.messages,
        tasks=services.tasks,
        contexts=services.contexts,
        search=runtime.search,
        registry=services.registry,
        streams=services.streams,
        keys=services.keys,
        audit=services.audit,
        push=services.push,
        signing_keys=runtime.push_keys,
        redis_embedded=redis_embedded,
        memories=services.memories,
    )


def _authenticator(settings: Settings, runtime: Runtime) -> Authenticator:
    """Static keys, the configured issuers' tokens and the managed keys."""
    tokens = None
    if settings.jwt_issuers:
        tokens = TokenVerifier(
            settings.jwt_issuers,
            runtime.outbound[0],
            leeway=settings.jwt_leeway_seconds,
            jwks_ttl=settings.jwks_cache_seconds,
            jwks_min_refetch=settings.jwks_min_refetch_seconds,
        )
    managed = None
    if settings.api_key_secret is not None:
        secret = settings.api_key_secret.get_secret_value().encode()
        managed = ManagedKeys(runtime.stores.api_keys, secret, settings.api_key_cache_seconds)
    return Authenticator(settings.api_keys, tokens, managed)


Lifespan = Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]]


def _lifespan(settings: Settings, runtime: Runtime, edge: Edge, mcp: MCPServer) -> Lifespan:
    """The runtime, the audit writer, gRPC and MCP's sessions started, and stopped in turn."""
    audit = edge.audit

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.open_mode:
            log.warning(
                "no API keys or token issuers configured: open mode, every caller is default/local"
            )
        exporter = _metrics_server(settings)
        await runtime.start()
        if audit is not None:
            audit.start()
        try:
            async with grpc_serving(settings, edge), mcp.session_manager.run():
                yield
        finally:
            if audit is not None:
                await audit.stop()
            await runtime.stop()
            if exporter is not None:
                await asyncio.to_thread(_stop_metrics_server, exporter)

    return lifespan


def _routes(settings: Settings, mcp_routes: list[BaseRoute]) -> list[BaseRoute]:
    # The router tries the routes that share a path's first segment, in this order: the
    # default agent's A2A routes (message:send first) lead, as they carry the traffic.
    # No two routes match the same path.
    return [
        *agent_routes(""),
        *operational_routes(metrics=settings.metrics_port is None),
        *registry_routes(),
        *key_routes(),
        *audit_routes(),
        *memory_routes(),
        *agent_routes("/agents/{agent_id}"),
        *jsonrpc_routes(),
        *proto_rest_routes(),
        *mcp_routes,
    ]


def _middleware(settings: Settings, hosts: HostRule, edge: Edge) -> list[Middleware]:
    """Outermost first: spans, the access log, the host rule, CORS, the body limit, the
    audit, authentication and rate limits."""
    return [
        *tracing.middleware(),
        Middleware(AccessLogMiddleware, enabled=settings.log_requests),
        Middleware(BrowserGuardMiddleware, rule=hosts),
        *_cors(settings.cors_origins),
        Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes),
        Middleware(AuditMiddleware, audit=edge.audit),
        Middleware(AuthMiddleware, authenticator=edge.authenticator, limiter=edge.limiter),
        Middleware(RateLimitMiddleware, limiter=edge.limiter),
    ]


def create_app(
    settings: Settings, extra_agents: Iterable[Agent] = (), *, redis_embedded: bool = False
) -> Starlette:
    """``redis_embedded``: Redis is the embedded one `gateway serve` runs, part of the
    gateway, so that ``/healthz`` fails while it does not answer."""
    runtime = Runtime.build(settings, extra_agents)
    state = _state(settings, runtime, Services.build(settings, runtime), redis_embedded)
    audit_store = runtime.stores.audit
    audit = AuditLog(audit_store, settings.audit_mirror) if audit_store is not None else None
    limiter = RateLimiter(settings, runtime.stores.rates)
    # gRPC's calls and HTTP's requests pass the same credentials, limits and audit.
    edge = Edge(state, _authenticator(settings, runtime), limiter, audit, settings.log_requests)
    hosts = HostRule.build(
        open_mode=settings.open_mode,
        allowed_hosts=settings.allowed_hosts,
        cors_origins=settings.cors_origins,
    )
    mcp_server, mcp_routes = mcp_endpoint(state.search, hosts.mcp_security(), state.memories)
    lifespan = _lifespan(settings, runtime, edge, mcp_server)
    app = GatewayStarlette(
        routes=_routes(settings, mcp_routes),
        middleware=_middleware(settings, hosts, edge),
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    # The same routes, looked up by their first path segment (see router.py).
    app.router = IndexedRouter(app.router.routes, lifespan=lifespan)
    app.state.gateway = state
    app.state.runtime = runtime
    app.state.audit = audit
    return app
