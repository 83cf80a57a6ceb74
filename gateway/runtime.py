"""The gateway's moving parts, built from settings and started and stopped together.

``gateway serve`` puts HTTP in front of a runtime; ``gateway worker`` runs one alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from redis.asyncio import Redis

from gateway.agents.base import Agent
from gateway.agents.plugins import load_agents
from gateway.agents.registry import AgentRegistry
from gateway.engine.events import TaskEvents
from gateway.engine.executor import RunExecutor
from gateway.engine.jobs import JobQueue
from gateway.engine.maintenance import Maintenance
from gateway.engine.memory_queue import MemoryQueue
from gateway.engine.stream_queue import StreamQueue
from gateway.settings import Settings
from gateway.store.jobs import JobStore
from gateway.store.redis_store import Store

__all__ = ["Runtime"]


def redis_client(settings: Settings) -> Redis:
    assert settings.redis_url, "a Redis URL is resolved before the runtime is built"
    return Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_timeout_seconds,
        socket_connect_timeout=settings.redis_timeout_seconds,
        max_connections=512,
    )


def consumer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class Runtime:
    settings: Settings
    client: Redis
    store: Store
    jobs: JobStore
    agents: AgentRegistry
    events: TaskEvents
    executor: RunExecutor
    queue: JobQueue
    maintenance: Maintenance

    @classmethod
    def build(cls, settings: Settings, extra_agents: Iterable[Agent] = ()) -> Runtime:
        client = redis_client(settings)
        store = Store(client, settings.context_ttl_seconds)
        jobs = JobStore(client)
        agents = AgentRegistry([*load_agents(settings.agent_plugins), *extra_agents])
        agents.get(settings.default_agent)
        events = TaskEvents(client)
        executor = RunExecutor(
            store,
            agents,
            events,
            context_window=settings.agent_context_messages,
            working_after=settings.working_after_ms / 1000,
        )
        queue: JobQueue
        if settings.queue == "memory":
            queue = MemoryQueue(executor, settings.runner_concurrency)
        else:
            queue = StreamQueue(
                jobs,
                executor,
                consumer=consumer_name(),
                concurrency=settings.runner_concurrency,
                lease_seconds=settings.job_lease_seconds,
                block_ms=int(min(1000, settings.redis_timeout_seconds * 500)),
                workers=settings.workers,
            )
        maintenance = Maintenance(
            store,
            jobs,
            executor,
            lease_seconds=settings.job_lease_seconds,
            max_attempts=settings.job_max_attempts,
            prune_interval_seconds=settings.prune_interval_seconds,
        )
        return cls(settings, client, store, jobs, agents, events, executor, queue, maintenance)

    async def start(self) -> None:
        await self.events.start(ready_within=self.settings.redis_timeout_seconds)
        await self.queue.start()
        if self.queue.durable:
            self.maintenance.start()

    async def stop(self) -> None:
        """Stop taking work, let runs finish within the grace period, then disconnect."""
        self.maintenance.stop()
        await self.queue.stop(self.settings.shutdown_grace_seconds)
        await self.events.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.client.aclose(), self.settings.redis_timeout_seconds)
