"""The gateway's moving parts, built from settings and started and stopped together.

``gateway serve`` puts HTTP in front of a runtime; ``gateway worker`` runs one alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
import httpx2

from gateway import tracing
from gateway.agents.base import Agent
from gateway.agents.registry import AgentRegistry
from gateway.backoff import Backoff, RetryPolicy
from gateway.context_memory.embedders import Embedder
from gateway.context_memory.indexer import Indexer
from gateway.engine.events import TaskEvents
from gateway.engine.executor import RunExecutor
from gateway.engine.maintenance import Maintenance
from gateway.engine.runs import JobQueue
from gateway.longterm.cortadel import Cortadel
from gateway.longterm.recall import LongTermMemory
from gateway.push.signing import SigningKeys
from gateway.runtime.background import Background
from gateway.runtime.clients import HttpClients
from gateway.runtime.connections import Connections
from gateway.runtime.execution import agent_registry, run_executor
from gateway.runtime.memory import Memory
from gateway.runtime.stores import Stores
from gateway.service.search import SearchService
from gateway.settings import Settings
from gateway.store.connection import RedisClient
from gateway.store.redis_store import Store
from gateway.store.translate import UNAVAILABLE

__all__ = ["RedisAbsentError", "Runtime"]

log = logging.getLogger("gateway")


class RedisAbsentError(RuntimeError):
    """Redis did not answer within ``GATEWAY_REDIS_STARTUP_SECONDS`` of the start."""


def _waiting(exc: BaseException) -> None:
    log.warning("Redis not answering yet; start-up waits", extra={"error": type(exc).__name__})


@dataclass
class Runtime:
    """Every part of a process, each built by its module of ``gateway.runtime``."""

    settings: Settings
    connections: Connections
    stores: Stores
    http: HttpClients
    memory: Memory
    agents: AgentRegistry
    events: TaskEvents
    executor: RunExecutor
    background: Background

    @classmethod
    def build(
        cls, settings: Settings, extra_agents: Iterable[Agent] = (), *, serving: bool = True
    ) -> Runtime:
        """``serving``: the process takes sends (``gateway serve``), not only jobs
        (``gateway worker``); such a process embeds in the background only with
        ``GATEWAY_SERVE_EMBEDS`` on."""
        tracing.configure(settings)
        connections = Connections.process(settings)
        stores = Stores.build(settings, connections)
        http = HttpClients.build(settings)
        agents = agent_registry(settings, stores, http, extra_agents)
        assert connections.events is not None  # a process's connections have one
        events = TaskEvents(connections.events)
        memory = Memory.build(settings, stores)
        executor = run_executor(settings, stores, agents, events, memory)
        background = Background.build(settings, stores, http, memory, executor, serving=serving)
        return cls(
            settings, connections, stores, http, memory, agents, events, executor, background
        )

    # The parts the app, its routes and the tests reach for by name.
    @property
    def client(self) -> RedisClient:
        return self.connections.client

    @property
    def store(self) -> Store:
        return self.stores.store

    @property
    def outbound(self) -> tuple[httpx.AsyncClient, httpx2.AsyncClient]:
        return self.http.outbound

    @property
    def push_keys(self) -> SigningKeys:
        return self.http.push_keys

    @property
    def queue(self) -> JobQueue:
        return self.background.queue

    @property
    def maintenance(self) -> Maintenance:
        return self.background.maintenance

    @property
    def indexer(self) -> Indexer | None:
        return self.background.indexer

    @property
    def embedder(self) -> Embedder | None:
        return self.memory.embedder

    @property
    def search(self) -> SearchService:
        return self.memory.search

    @property
    def cortadel(self) -> Cortadel | None:
        return self.memory.cortadel

    @property
    def longterm(self) -> LongTermMemory | None:
        return self.memory.longterm

    async def start(self) -> None:
        """Start; ``ForeignKeyError`` (before any work is taken) when the encryption keys do
        not open what the store holds (``key_registry.py``)."""
        try:
            await self._join()
        except BaseException:
            await self._close()
            raise
        await self.events.start(ready_within=self.settings.redis_timeout_seconds)
        work = self.background
        await work.queue.start()
        if work.indexer is not None:
            await work.indexer.start()
        if self.cortadel is not None:
            self.cortadel.start()
        if work.outbox is not None:
            await work.outbox.start()
        await self.push_keys.ensure(self.client)
        if work.pusher is not None:
            await work.pusher.start()
        if work.leased:
            work.maintenance.start()

    async def _join(self) -> None:
        """Join the keyring once Redis answers: a Redis still starting (unreachable, loading
        its data, a cluster still forming) is waited for up to
        ``GATEWAY_REDIS_STARTUP_SECONDS``, each failed try logged, so processes started
        before their Redis do not exit; then ``RedisAbsentError``."""
        waiting = RetryPolicy(Backoff(0.1, 2.0), UNAVAILABLE)
        within = self.settings.redis_startup_seconds
        try:
            await waiting.call(self.stores.key_registry.join, within=within, on_retry=_waiting)
        except UNAVAILABLE as exc:
            message = f"Redis did not answer within {within:g} s (GATEWAY_REDIS_STARTUP_SECONDS)"
            log.error(message, extra={"error": type(exc).__name__})
            raise RedisAbsentError(message) from exc

    async def stop(self) -> None:
        """Stop taking work, let runs finish within the grace period, then disconnect."""
        work = self.background
        await work.maintenance.stop()
        if work.indexer is not None:
            await work.indexer.stop()
        if work.outbox is not None:
            await work.outbox.stop()
        if work.pusher is not None:
            await work.pusher.stop()
        await work.queue.stop(self.settings.shutdown_grace_seconds)
        await self.stores.key_registry.leave()
        if self.cortadel is not None:
            with contextlib.suppress(Exception):
                await self.cortadel.close()
        await self.events.stop()
        await self._close()

    async def _close(self) -> None:
        """Close the connections (to Redis, the embedder, agents and webhooks)."""
        await self.http.close()
        await self.stores.tail.stop()
        closing = getattr(self.embedder, "close", None)
        if closing is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closing(), self.settings.redis_timeout_seconds)
        await self.connections.close()
