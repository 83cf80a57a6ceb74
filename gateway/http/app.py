"""The ASGI application: wiring of store, engine, services and routes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.middleware import Middleware

from gateway.agents.base import Agent
from gateway.agents.registry import AgentRegistry
from gateway.engine.events import TaskEvents
from gateway.engine.runner import InProcessRunner
from gateway.http.access_log import AccessLogMiddleware
from gateway.http.auth import Authenticator, AuthMiddleware
from gateway.http.errors import EXCEPTION_HANDLERS
from gateway.http.limits import BodyLimitMiddleware
from gateway.http.routes import agent_routes, operational_routes
from gateway.http.state import AppState
from gateway.service.contexts import ContextService
from gateway.service.messages import MessageService
from gateway.service.tasks import TaskService
from gateway.settings import Settings
from gateway.store.redis_store import Store

__all__ = ["create_app"]

log = logging.getLogger("gateway")


def redis_client(settings: Settings) -> Redis:
    assert settings.redis_url, "a Redis URL is resolved before the app is built"
    return Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_timeout_seconds,
        socket_connect_timeout=settings.redis_timeout_seconds,
        max_connections=512,
    )


def create_app(settings: Settings, extra_agents: Iterable[Agent] = ()) -> Starlette:
    client = redis_client(settings)
    store = Store(client, settings.context_ttl_seconds)
    agents = AgentRegistry(extra_agents)
    agents.get(settings.default_agent)
    events = TaskEvents(client)
    runner = InProcessRunner(
        store,
        agents,
        events,
        concurrency=settings.runner_concurrency,
        context_window=settings.agent_context_messages,
        working_after=settings.working_after_ms / 1000,
    )
    state = AppState(
        settings=settings,
        store=store,
        agents=agents,
        messages=MessageService(
            store,
            agents,
            runner,
            events,
            settings.blocking_timeout_seconds,
        ),
        tasks=TaskService(store),
        contexts=ContextService(store),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.open_mode:
            log.warning("no API keys configured: open mode, every caller is default/local")
        await events.start(ready_within=settings.redis_timeout_seconds)
        await runner.start()
        try:
            yield
        finally:
            await runner.stop(settings.shutdown_grace_seconds)
            await events.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), settings.redis_timeout_seconds)

    app = Starlette(
        routes=[*operational_routes(), *agent_routes(""), *agent_routes("/agents/{agent_id}")],
        middleware=[
            Middleware(AccessLogMiddleware, enabled=settings.log_requests),
            Middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes),
            Middleware(AuthMiddleware, authenticator=Authenticator(settings.api_keys)),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    app.state.gateway = state
    return app
