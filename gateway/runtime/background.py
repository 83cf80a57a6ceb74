"""A process's background work, from settings: the run queue, and with workers the
indexer, the Cortadel outbox and the webhook deliverer, and the maintenance over their
streams."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.context_memory.indexer import Indexer
from gateway.engine.durable_queue import DurableQueue
from gateway.engine.executor import RunExecutor
from gateway.engine.in_process_queue import InProcessQueue
from gateway.engine.maintenance import Maintenance
from gateway.engine.runs import JobQueue
from gateway.longterm.outbox import Outbox
from gateway.push.deliverer import PushDeliverer, webhook_retry
from gateway.runtime.clients import HttpClients
from gateway.runtime.connections import consumer_name
from gateway.runtime.memory import Memory
from gateway.runtime.stores import Stores
from gateway.settings import Settings
from gateway.store.embed_texts import EmbedTexts
from gateway.store.longterm_store import LongTermStore
from gateway.store.memory_store import MemoryStore

__all__ = ["Background"]


# Blocking stream reads are kept short: a cancellation that lands while redis-py is still
# connecting is lost, and shutdown then waits out the read.
_BLOCK_MS = 250


def _block_ms(settings: Settings) -> int:
    """A worker's blocking read of its stream: _BLOCK_MS, or half the Redis timeout if less."""
    return int(min(_BLOCK_MS, settings.redis_timeout_seconds * 500))


def _queue(settings: Settings, stores: Stores, executor: RunExecutor) -> JobQueue:
    """The run queue: in-process (``GATEWAY_QUEUE=memory``) or the durable jobs stream."""
    if settings.queue == "memory":
        return InProcessQueue(executor, settings.runner_concurrency)
    return DurableQueue(
        stores.jobs,
        executor,
        consumer=consumer_name(),
        concurrency=settings.runner_concurrency,
        lease_seconds=settings.job_lease_seconds,
        block_ms=_block_ms(settings),
        workers=settings.workers,
    )


def _indexer(settings: Settings, stores: Stores, memory: Memory, serving: bool) -> Indexer | None:
    """The indexer, in a process with workers and an embedder; a serving process told not
    to embed (``GATEWAY_SERVE_EMBEDS`` off) leaves every message to the workers'."""
    if (
        memory.embedder is None
        or not settings.workers
        or not (settings.serve_embeds or not serving)
    ):
        return None
    # A serving process's indexer takes the texts of its own sends without reading them back.
    stores.store.embed_texts = EmbedTexts() if serving else None
    return Indexer(
        MemoryStore(stores.store),
        stores.embeds,
        memory.embedder,
        consumer=consumer_name(),
        batch_size=settings.embedder_batch_size,
        max_chars=settings.embedder_max_chars,
        backoff_cap=settings.embedder_backoff_max_seconds,
        block_ms=_block_ms(settings),
        lease_seconds=settings.job_lease_seconds,
        linger=settings.embedder_linger_ms / 1000,
        progress=memory.progress,
    )


def _outbox(settings: Settings, stores: Stores, memory: Memory) -> Outbox | None:
    """The Cortadel outbox's consumer, in a process with workers and long-term memory."""
    if memory.cortadel is None or not settings.workers:
        return None
    return Outbox(
        memory.cortadel,
        LongTermStore(stores.store),
        stores.outbox,
        consumer=consumer_name(),
        header=settings.cortadel.memory_header,
        batch=settings.cortadel.outbox_batch,
        block_ms=_block_ms(settings),
        lease_seconds=settings.job_lease_seconds,
        backoff_cap=settings.cortadel.backoff_max_seconds,
        forget_scrubbed=settings.cortadel.scrub,
        audit=stores.audit,
    )


def _deliverer(settings: Settings, stores: Stores, http: HttpClients) -> PushDeliverer | None:
    """The webhook deliverer, in a process with workers."""
    if not settings.workers:
        return None
    return PushDeliverer(
        stores.store,
        stores.push,
        http.push_http,
        http.push_keys,
        consumer=consumer_name(),
        concurrency=settings.push_concurrency,
        per_origin=settings.push_per_origin,
        block_ms=_block_ms(settings),
        lease_seconds=settings.job_lease_seconds,
        retry_seconds=settings.push_retry_seconds,
        retry=webhook_retry(settings.push_backoff_first_seconds, settings.push_backoff_max_seconds),
    )


def _maintenance(
    settings: Settings, stores: Stores, executor: RunExecutor, long_term: bool
) -> Maintenance:
    """Reclaiming and pruning every stream (the outbox's only with long-term memory, else
    swept of what an earlier configuration left)."""
    return Maintenance(
        stores.store,
        stores.jobs,
        executor,
        embeds=stores.embeds,
        outbox=stores.outbox if long_term else None,
        push=stores.push,
        swept=[] if long_term else [stores.outbox],
        lease_seconds=settings.job_lease_seconds,
        max_attempts=settings.job_max_attempts,
        prune_interval_seconds=settings.prune_interval_seconds,
        disk_rewrite=stores.store.disk_rewrite,
    )


@dataclass
class Background:
    queue: JobQueue
    indexer: Indexer | None
    outbox: Outbox | None
    pusher: PushDeliverer | None  # None in a process without workers
    maintenance: Maintenance

    @property
    def leased(self) -> bool:
        """Whether any of it takes leased jobs, which maintenance then reclaims."""
        return (
            self.queue.durable
            or self.indexer is not None
            or self.outbox is not None
            or self.pusher is not None
        )

    @classmethod
    def build(
        cls,
        settings: Settings,
        stores: Stores,
        http: HttpClients,
        memory: Memory,
        executor: RunExecutor,
        *,
        serving: bool,
    ) -> Background:
        """``serving``: the process takes sends, not only jobs (see ``Runtime.build``)."""
        return cls(
            queue=_queue(settings, stores, executor),
            indexer=_indexer(settings, stores, memory, serving),
            outbox=_outbox(settings, stores, memory),
            pusher=_deliverer(settings, stores, http),
            maintenance=_maintenance(settings, stores, executor, memory.cortadel is not None),
        )
