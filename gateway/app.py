"""The ASGI application: HTTP in front of a runtime (store, engine, services).

The app factory is the composition root of a served process, above ``gateway.http``: it
builds the runtime, the services over it, and the HTTP routes and middleware in front."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from gateway import tracing
from gateway.agents.base import Agent
from gateway.audit.log import AuditLog
from gateway.engine.hand_off import RunHandOff
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
from gateway.http.state import AppState
from gateway.identity.managed import ManagedKeys
from gateway.identity.tokens import TokenVerifier
from gateway.runtime import Runtime
from gateway.service.agents import AgentService
from gateway.service.audit import AuditService
from gateway.service.contexts import ContextService
from gateway.service.keys import KeyService
from gateway.service.memories import MemoryService
from gateway.service.messages import MessageService
from gateway.service.push import PushService
from gateway.service.stream_limits import StreamLimits
from gateway.service.streams import StreamService
from gateway.service.tasks import TaskService
from gateway.settings import Settings
from gateway.store.apikeys_store import ApiKeyStore
from gateway.store.audit_store import AuditStore
from gateway.store.push_store import PushStore
from gateway.store.rate_store import RateStore

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


def create_app(
    settings: Settings, extra_agents: Iterable[Agent] = (), *, redis_embedded: bool = False
) -> Starlette:
    """``redis_embedded``: Redis is the embedded one `gateway serve` runs, part of the
    gateway, so that ``/healthz`` fails while it does not answer."""
    runtime = Runtime.build(settings, extra_agents)
    push = None
    if runtime.push_keys is not None and runtime.push_policy is not None:
        push = PushService(
            runtime.store, PushStore(runtime.store), runtime.push_policy, settings.push_artifacts
        )
    messages = MessageService(
        runtime.store,
        runtime.agents,
        RunHandOff(runtime.store, runtime.queue, settings.run_policy),
        runtime.events,
        settings.blocking_timeout_seconds,
        embedding=runtime.embedder is not None,
        quotas=(
            settings.quota_messages_per_context,
            settings.quota_bytes_per_context,
            settings.quota_contexts_per_user,
            settings.quota_running_tasks_per_user,
        ),
        push=push,
        longterm=runtime.longterm,
        client_context_ids=settings.client_context_ids == "accept",
    )
    state = AppState(
        settings=settings,
        store=runtime.store,
        agents=runtime.agents,
        messages=messages,
        tasks=TaskService(runtime.store),
        contexts=ContextService(
            runtime.store,
            runtime.job_streams,
            forget_memories=settings.cortadel.enabled and settings.cortadel.scrub,
        ),
        search=runtime.search,
        registry=AgentService(runtime.agents, runtime.allowlist),
        streams=StreamService(
            runtime.store,
            runtime.events,
            messages,
            settings.sse_keepalive_seconds,
            tail=runtime.tail,
            limits=StreamLimits(settings.streams_per_principal, settings.streams_per_process),
            buffer_bytes=settings.stream_buffer_bytes,
        ),
        push=push,
        signing_keys=runtime.push_keys,
        redis_embedded=redis_embedded,
        memories=MemoryService(runtime.cortadel, runtime.longterm, runtime.store),
    )

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
        key_store = ApiKeyStore(runtime.client, runtime.store.scripts)
        static_users = {(e.tenant, e.user) for e in settings.api_keys.values()}
        state.keys = KeyService(key_store, secret, frozenset(static_users), runtime.store)
        managed = ManagedKeys(key_store, secret, settings.api_key_cache_seconds)
    authenticator = Authenticator(settings.api_keys, tokens, managed)
    limiter = RateLimiter(settings, RateStore(runtime.store.scripts, runtime.store.hot))
    audit = None
    if settings.audit:
        audit_store = AuditStore(
            runtime.client,
            settings.audit_max_entries,
            settings.audit_max_age_seconds,
            hot=runtime.store.hot,
        )
        audit = AuditLog(audit_store, settings.audit_mirror)
        state.audit = AuditService(audit_store)

    hosts = HostRule.build(
        open_mode=settings.open_mode,
        allowed_hosts=settings.allowed_hosts,
        cors_origins=settings.cors_origins,
    )
    mcp_server, mcp_routes = mcp_endpoint(state.search, hosts.mcp_security(), state.memories)

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
        edge = Edge(state, authenticator, limiter, audit, settings.log_requests)
        try:
            async with grpc_serving(settings, edge), mcp_server.session_manager.run():
                yield
        finally:
            if audit is not None:
                await audit.stop()
            await runtime.stop()
            if exporter is not None:
                await asyncio.to_thread(_stop_metrics_server, exporter)

    app = Starlette(
        # The router tries the routes that share a path's first segment, in this order: the
        # default agent's A2A routes (message:send first) lead, as they carry the traffic.
        # No two routes match the same path.
        routes=[
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
        ],
        middleware=[
            *tracing.middleware(),
            Middleware(AccessLogMiddleware, enabled=settings.log_requests),
            Middleware(BrowserGuardMiddleware, rule=hosts),
            *_cors(settings.cors_origins),
            Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes),
            Middleware(AuditMiddleware, audit=audit),
            Middleware(AuthMiddleware, authenticator=authenticator, limiter=limiter),
            Middleware(RateLimitMiddleware, limiter=limiter),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    # The same routes, looked up by their first path segment (see router.py).
    app.router = IndexedRouter(app.router.routes, lifespan=lifespan)
    app.state.gateway = state
    app.state.runtime = runtime
    app.state.audit = audit
    return app
