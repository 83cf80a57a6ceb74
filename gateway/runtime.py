"""The gateway's moving parts, built from settings and started and stopped together.

``gateway serve`` puts HTTP in front of a runtime; ``gateway worker`` runs one alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

import httpx
import httpx2
from redis.asyncio import Redis

from gateway import tracing
from gateway.agents.base import Agent
from gateway.agents.key_env import KeyEnvPolicy
from gateway.agents.plugins import load_agents
from gateway.agents.registry import AgentFactory, AgentRegistry
from gateway.configuration import ConfigurationError
from gateway.context_memory.embedders import Embedder
from gateway.context_memory.factory import build_embedder
from gateway.context_memory.indexer import Indexer
from gateway.context_memory.progress import EmbeddingProgress
from gateway.engine.durable_queue import DurableQueue
from gateway.engine.events import TaskEvents
from gateway.engine.executor import RunExecutor
from gateway.engine.in_process_queue import InProcessQueue
from gateway.engine.maintenance import Maintenance
from gateway.engine.runs import JobQueue
from gateway.longterm.cortadel import Cortadel
from gateway.longterm.outbox import Outbox
from gateway.longterm.recall import LongTermMemory
from gateway.outbound import Allowlist, guarded_client
from gateway.push.deliverer import PushDeliverer, webhook_retry
from gateway.push.destinations import WebhookPolicy
from gateway.push.signing import SigningKeys
from gateway.service.search import SearchService
from gateway.settings import Settings
from gateway.store.agents_store import AgentStore
from gateway.store.audit_store import AuditStore
from gateway.store.connection import RedisClient, RedisTarget
from gateway.store.disk_rewrite import DiskRewrite
from gateway.store.event_tail import EventTail
from gateway.store.jobs import JobStore
from gateway.store.key_registry import KeyRegistry
from gateway.store.keys import (
    EMBEDS,
    EMBEDS_DEAD,
    EMBEDS_GROUP,
    OUTBOX,
    OUTBOX_DEAD,
    OUTBOX_GROUP,
    PUSH,
    PUSH_DEAD,
    PUSH_GROUP,
)
from gateway.store.longterm_store import LongTermStore
from gateway.store.memory_store import MemoryStore
from gateway.store.redis_store import Store
from gateway.store.sealing import Sealer, sealer_for

__all__ = ["Runtime"]

log = logging.getLogger("gateway")


# Blocking stream reads are kept short: a cancellation that lands while redis-py is still
# connecting is lost, and shutdown then waits out the read.
_BLOCK_MS = 250


def sealer_of(settings: Settings) -> Sealer:
    """The store's sealer (``sealing.sealer_for``), with a warning when encryption is off."""
    if settings.encryption == "off":
        log.warning(
            "encryption at rest is OFF (GATEWAY_ENCRYPTION=off): message content is stored "
            "in clear in Redis and its files"
        )
    return sealer_for(settings)


def _redis_url(settings: Settings) -> str:
    if not settings.redis_url:  # `gateway serve` and `worker` resolve one before this
        raise ConfigurationError(["REDIS_URL: not set; the runtime needs a Redis to use"])
    return settings.redis_url


def consumer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class Runtime:
    settings: Settings
    client: RedisClient
    events_client: Redis
    store: Store
    # The one reader of the task event logs this process's streams follow.
    tail: EventTail
    jobs: JobStore
    # Every job stream (runs, embeddings, the Cortadel outbox, webhook deliveries): a
    # context's scrub removes its dead letters from each.
    job_streams: tuple[JobStore, ...]
    agents: AgentRegistry
    events: TaskEvents
    executor: RunExecutor
    queue: JobQueue
    maintenance: Maintenance
    embedder: Embedder | None
    indexer: Indexer | None
    allowlist: Allowlist
    key_registry: KeyRegistry  # this process among those sealing and opening the store's data
    search: SearchService
    outbound: tuple[httpx.AsyncClient, httpx2.AsyncClient]
    cortadel: Cortadel | None = None
    outbox: Outbox | None = None
    longterm: LongTermMemory | None = None
    # Push notifications (the deliverer is None in a process without workers).
    push_keys: SigningKeys | None = None
    push_policy: WebhookPolicy | None = None
    pusher: PushDeliverer | None = None
    push_http: httpx.AsyncClient | None = None

    @classmethod
    def build(
        cls, settings: Settings, extra_agents: Iterable[Agent] = (), *, serving: bool = True
    ) -> Runtime:
        """``serving``: the process takes sends (``gateway serve``), not only jobs
        (``gateway worker``); such a process embeds in the background only with
        ``GATEWAY_SERVE_EMBEDS`` on."""
        tracing.configure(settings)
        _redis_url(settings)
        target = RedisTarget.from_settings(settings)
        client = target.client(settings.redis_timeout_seconds)
        store = Store(
            client,
            settings.context_ttl_seconds,
            cluster=target.cluster,
            sealer=sealer_of(settings),
            hot=target.multiplexed(settings.redis_timeout_seconds, traced=tracing.enabled()),
        )
        if settings.scrub_rewrite == "on" and target.cluster:
            log.warning("GATEWAY_SCRUB_REWRITE=on is ignored on a Redis Cluster (see README)")
        elif settings.scrub_rewrite == "on":
            store.disk_rewrite = DiskRewrite(client, settings.scrub_rewrite_seconds)
        tracing.instrument_redis(client, store.scripts)

        def job_store(*names: str) -> JobStore:
            return JobStore(
                client,
                *names,
                dead_max_entries=settings.dead_letter_max_entries,
                dead_max_age_seconds=settings.dead_letter_max_age_seconds,
                hot=store.hot,
            )

        jobs = job_store()
        # A worker's blocking read of its stream: _BLOCK_MS, or half the Redis timeout if less.
        block_ms = int(min(_BLOCK_MS, settings.redis_timeout_seconds * 500))
        allowlist = Allowlist(
            settings.outbound_allowlist,
            [
                settings.embedder_url,
                settings.cortadel.url,
                *(issuer.jwks_url for issuer in settings.jwt_issuers),
            ],
        )
        outbound = (
            guarded_client(allowlist, httpx, timeout=60.0),
            guarded_client(allowlist, httpx2, timeout=60.0),
        )
        tracing.instrument_http(*outbound)  # a2a-sdk's and the openai SDK's requests
        agents = AgentRegistry(
            [*load_agents(settings.agent_plugins), *extra_agents],
            AgentStore(client, settings.context_ttl_seconds, store.sealer),
            AgentFactory(
                allowlist,
                *outbound,
                KeyEnvPolicy.of(settings.agent_key_env_prefix, settings.agent_key_env_names),
            ),
            cache_seconds=settings.agent_cache_seconds,
        )
        agents.get(settings.default_agent)
        events_client = target.events_client(settings.redis_timeout_seconds)
        events = TaskEvents(events_client)
        tail = EventTail(
            target.url,
            client if target.cluster else None,
            timeout=settings.redis_timeout_seconds,
        )
        cortadel = Cortadel(settings.cortadel) if settings.cortadel.enabled else None
        audit = (
            AuditStore(
                client, settings.audit_max_entries, settings.audit_max_age_seconds, hot=store.hot
            )
            if settings.audit
            else None
        )
        longterm = None
        if cortadel is not None:
            defaults = settings.cortadel.options()
            longterm = LongTermMemory(cortadel, LongTermStore(store), defaults, audit)
        embedder = build_embedder(settings)
        progress = EmbeddingProgress()  # this process's indexer tells its waiting searches
        search = SearchService(MemoryStore(store), embedder, settings.search_wait_seconds, progress)
        # A serving process told not to embed leaves every message to the workers' indexers.
        embeds_here = settings.serve_embeds or not serving
        executor = RunExecutor(
            store,
            agents,
            events,
            context_window=settings.agent_context_messages,
            working_after=settings.working_after_ms / 1000,
            longterm=longterm,
            search_for=search.for_run,
            retry_seconds=settings.job_lease_seconds,
        )
        queue: JobQueue
        if settings.queue == "memory":
            queue = InProcessQueue(executor, settings.runner_concurrency)
        else:
            queue = DurableQueue(
                jobs,
                executor,
                consumer=consumer_name(),
                concurrency=settings.runner_concurrency,
                lease_seconds=settings.job_lease_seconds,
                block_ms=block_ms,
                workers=settings.workers,
            )
        embeds = job_store(EMBEDS, EMBEDS_GROUP, EMBEDS_DEAD)
        indexer = None
        if embedder is not None and settings.workers and embeds_here:
            indexer = Indexer(
                MemoryStore(store),
                embeds,
                embedder,
                consumer=consumer_name(),
                batch_size=settings.embedder_batch_size,
                max_chars=settings.embedder_max_chars,
                backoff_cap=settings.embedder_backoff_max_seconds,
                block_ms=block_ms,
                lease_seconds=settings.job_lease_seconds,
                linger=settings.embedder_linger_ms / 1000,
                progress=progress,
            )
        outbox_jobs = job_store(OUTBOX, OUTBOX_GROUP, OUTBOX_DEAD)
        outbox = None
        if cortadel is not None and settings.workers:
            outbox = Outbox(
                cortadel,
                LongTermStore(store),
                outbox_jobs,
                consumer=consumer_name(),
                header=settings.cortadel.memory_header,
                batch=settings.cortadel.outbox_batch,
                block_ms=block_ms,
                lease_seconds=settings.job_lease_seconds,
                backoff_cap=settings.cortadel.backoff_max_seconds,
                forget_scrubbed=settings.cortadel.scrub,
                audit=audit,
            )
        push_jobs = job_store(PUSH, PUSH_GROUP, PUSH_DEAD)
        pusher = None
        store.push_artifacts = settings.push_artifacts
        store.push_lease_ms = int(settings.job_lease_seconds * 1000)
        bound = f"[{settings.host}]" if ":" in settings.host else settings.host
        issuer = settings.public_url or f"http://{bound}:{settings.port}"
        push_keys = SigningKeys.from_files(settings.push_signing_keys, issuer)
        push_policy = WebhookPolicy(settings.push_allowlist, restrict=settings.push_restrict)
        # Connections are kept for reuse (httpx keeps 20 by default: a busy deliverer
        # would reconnect for most requests; the pool's limits go to the transport).
        push_http = guarded_client(
            push_policy,
            httpx,
            timeout=settings.push_timeout_seconds,
            limits=httpx.Limits(
                max_connections=settings.push_concurrency,
                max_keepalive_connections=settings.push_concurrency,
            ),
        )
        if settings.workers:
            pusher = PushDeliverer(
                store,
                push_jobs,
                push_http,
                push_keys,
                consumer=consumer_name(),
                concurrency=settings.push_concurrency,
                per_origin=settings.push_per_origin,
                block_ms=block_ms,
                lease_seconds=settings.job_lease_seconds,
                retry_seconds=settings.push_retry_seconds,
                retry=webhook_retry(
                    settings.push_backoff_first_seconds, settings.push_backoff_max_seconds
                ),
            )
        maintenance = Maintenance(
            store,
            jobs,
            executor,
            embeds=embeds,
            outbox=outbox_jobs if cortadel is not None else None,
            push=push_jobs,
            swept=[outbox_jobs] if cortadel is None else [],
            lease_seconds=settings.job_lease_seconds,
            max_attempts=settings.job_max_attempts,
            prune_interval_seconds=settings.prune_interval_seconds,
            disk_rewrite=store.disk_rewrite,
        )
        return cls(
            settings=settings,
            client=client,
            events_client=events_client,
            store=store,
            tail=tail,
            jobs=jobs,
            job_streams=(jobs, embeds, outbox_jobs, push_jobs),
            agents=agents,
            events=events,
            executor=executor,
            queue=queue,
            maintenance=maintenance,
            embedder=embedder,
            indexer=indexer,
            allowlist=allowlist,
            key_registry=KeyRegistry(client, store.sealer, consumer_name()),
            search=search,
            outbound=outbound,
            cortadel=cortadel,
            outbox=outbox,
            longterm=longterm,
            push_keys=push_keys,
            push_policy=push_policy,
            pusher=pusher,
            push_http=push_http,
        )

    async def start(self) -> None:
        """Start; ``ForeignKeyError`` (before any work is taken) when the encryption keys do
        not open what the store holds (``key_registry.py``)."""
        try:
            await self.key_registry.join()
        except BaseException:
            await self._close()
            raise
        await self.events.start(ready_within=self.settings.redis_timeout_seconds)
        await self.queue.start()
        if self.indexer is not None:
            await self.indexer.start()
        if self.cortadel is not None:
            self.cortadel.start()
        if self.outbox is not None:
            await self.outbox.start()
        if self.push_keys is not None:
            await self.push_keys.ensure(self.client)
        if self.pusher is not None:
            await self.pusher.start()
        if (
            self.queue.durable
            or self.indexer is not None
            or self.outbox is not None
            or self.pusher is not None
        ):
            self.maintenance.start()

    async def stop(self) -> None:
        """Stop taking work, let runs finish within the grace period, then disconnect."""
        await self.maintenance.stop()
        if self.indexer is not None:
            await self.indexer.stop()
        if self.outbox is not None:
            await self.outbox.stop()
        if self.pusher is not None:
            await self.pusher.stop()
        await self.queue.stop(self.settings.shutdown_grace_seconds)
        await self.key_registry.leave()
        if self.cortadel is not None:
            with contextlib.suppress(Exception):
                await self.cortadel.close()
        await self.events.stop()
        await self._close()

    async def _close(self) -> None:
        """Close the connections (to Redis, the embedder, agents and webhooks)."""
        clients: list[httpx.AsyncClient | httpx2.AsyncClient] = [*self.outbound]
        if self.push_http is not None:
            clients.append(self.push_http)
        for http in clients:
            with contextlib.suppress(Exception):
                await http.aclose()
        await self.tail.stop()
        closing = getattr(self.embedder, "close", None)
        if closing is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(closing(), self.settings.redis_timeout_seconds)
        if self.store.hot is not None:
            await self.store.hot.close()
        for client in (self.client, self.events_client):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.aclose(), self.settings.redis_timeout_seconds)
