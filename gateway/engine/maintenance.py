"""Periodic maintenance on APScheduler, in every process.

Every process reclaims stalled jobs: a job is claimed with ``XCLAIM`` and the lease as
its minimum idle time, which resets that idle time, so exactly one process takes each
stalled job over, however many try. No process waits for another to notice a death:
a job whose worker died is back in its queue within the lease plus one reclaim interval
(at most 2 s). The sweeps (index entries of expired contexts, dead letters past their
retention, consumers of processes that died) run only in the process holding the lead,
a Redis key that expires within three reclaim intervals unless its holder renews it
(which it does on every interval, and gives up when it stops). Each job is idempotent,
so a change of leader mid-way is harmless. Queue figures are read by every process, so
each replica's /metrics reports them. On a Redis Cluster the leader also moves webhook
deliveries left in their context's slot by a process that died between a write and its
second step (``Store.sweep_pushes``), every lease.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from collections.abc import Sequence

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from gateway import metrics
from gateway.engine.executor import RunExecutor
from gateway.engine.runs import RunJob
from gateway.errors import GatewayError
from gateway.store.disk_rewrite import DiskRewrite
from gateway.store.jobs import RECLAIMER, JobStore
from gateway.store.redis_store import Store

__all__ = ["Maintenance"]

log = logging.getLogger("gateway.maintenance")

DEAD_TEXT = "The task could not be run after several attempts."


class Maintenance:
    def __init__(
        self,
        store: Store,
        jobs: JobStore,
        executor: RunExecutor,
        *,
        embeds: JobStore | None = None,
        outbox: JobStore | None = None,
        push: JobStore | None = None,
        swept: Sequence[JobStore] = (),
        lease_seconds: float,
        max_attempts: int,
        prune_interval_seconds: float,
        disk_rewrite: DiskRewrite | None = None,
    ) -> None:
        self._disk_rewrite = disk_rewrite
        self._store, self._executor = store, executor
        self._jobs, self._embeds, self._outbox = jobs, embeds, outbox
        self._streams = [s for s in (jobs, embeds, outbox, push) if s is not None]
        self._push = push
        # swept: streams no job of which is reclaimed here, tidied all the same
        self._swept = [*self._streams, *swept]
        self._lease_ms = int(lease_seconds * 1000)
        self._max_attempts = max_attempts
        self._reclaim_every = min(2.0, max(0.25, lease_seconds / 4))
        self._prune_every = prune_interval_seconds
        # A consumer idle this long holding no job belongs to a process that died (a live
        # one reads at least every blocking read, a fraction of a second).
        self._consumer_idle_ms = 3 * self._lease_ms
        self.node = f"{uuid.uuid4().hex[:12]}"
        self._scheduler = AsyncIOScheduler()

    def start(self) -> None:
        # One run of each at a time; runs due while the loop was busy coalesce into one that
        # runs late (never dropped as missed).
        every = functools.partial(
            self._scheduler.add_job,
            trigger="interval",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
        )
        every(self._tick, seconds=self._reclaim_every)
        every(self.prune, seconds=self._prune_every)
        every(self.publish_figures, seconds=5)
        if self._push is not None and self._store.cluster:
            every(self.sweep_pushes, seconds=self._lease_ms / 1000)
        self._scheduler.start()

    async def stop(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        with contextlib.suppress(GatewayError):
            await self._jobs.resign(self.node)

    async def _leading(self) -> bool:
        ttl = int(self._reclaim_every * 3 * 1000)
        try:
            return await self._jobs.lead(self.node, ttl)
        except GatewayError:
            return False

    async def _tick(self) -> None:
        # keeps the lead for the sweeps while this process lives
        if await self._leading() and self._disk_rewrite is not None:
            try:
                await self._disk_rewrite.run_if_due()
            except GatewayError:
                log.warning("disk rewrite check interrupted: store unavailable")
        await self.reclaim()

    async def reclaim(self) -> int:
        """Put jobs whose worker stopped renewing its lease back in their queue; after
        ``max_attempts`` attempts, fail their task and move them to the dead letters.
        Safe in every process at once: each stalled job is claimed by one of them."""
        done = 0
        try:
            for stream in self._streams:
                done += await self._reclaim(stream)
        except GatewayError:
            log.warning("reclaim interrupted: store unavailable")
        return done

    async def _reclaim(self, stream: JobStore) -> int:
        done = 0
        for stale in await stream.stale(self._lease_ms, 100):
            claimed = await stream.claim(RECLAIMER, self._lease_ms, stale.entry)
            if claimed is None:
                continue
            entry, fields = claimed
            attempts = int(fields.get(b"n", b"1"))
            if attempts >= self._max_attempts:
                await self._give_up(stream, entry, fields, attempts)
            else:
                await stream.requeue(entry, fields, attempts + 1)
                metrics.JOBS_RECLAIMED.inc()
            done += 1
        return done

    async def _give_up(
        self, stream: JobStore, entry: str, fields: dict[bytes, bytes], attempts: int
    ) -> None:
        if stream is self._jobs:
            try:
                await self._executor.fail(RunJob.from_wire(fields, ""), DEAD_TEXT)
            except (KeyError, ValueError, TypeError):
                log.error("malformed job entry", extra={"entry": entry})
        await stream.dead_letter(entry, fields, f"stalled {attempts} times")
        log.error("job moved to dead letters", extra={"entry": entry, "attempts": attempts})

    async def prune(self) -> int:
        """Drop index entries of contexts that expired (returns how many), dead letters past
        their retention, and consumers of processes that died once they hold no job."""
        if not await self._leading():
            return 0
        for stream in self._swept:
            with contextlib.suppress(GatewayError):
                await stream.trim_dead()
                await stream.prune_consumers(self._consumer_idle_ms)
        try:
            return await self._store.prune_indexes()
        except GatewayError:
            return 0

    async def sweep_pushes(self) -> int:
        """Cluster mode: move deliveries stranded in their context's slot to the push
        stream (returns how many; 0 unless this process leads)."""
        if not await self._leading():
            return 0
        try:
            return await self._store.sweep_pushes()
        except GatewayError:
            log.warning("push sweep interrupted: store unavailable")
            return 0

    async def publish_figures(self) -> None:
        try:
            figures = await self._jobs.figures()
            embeds = await self._embeds.figures() if self._embeds is not None else None
            outbox = await self._outbox.figures() if self._outbox is not None else None
        except GatewayError:
            return
        if outbox is not None:
            metrics.OUTBOX_DEPTH.set(outbox.queued + outbox.pending)
            metrics.OUTBOX_AGE.set(outbox.oldest_seconds)
        metrics.JOBS_QUEUED.set(figures.queued)
        metrics.JOBS_PENDING.set(figures.pending)
        metrics.JOBS_LAG.set(figures.lag_seconds)
        metrics.JOBS_DEAD.set(figures.dead)
        if embeds is not None:
            metrics.EMBED_QUEUED.set(embeds.queued + embeds.pending)
            metrics.EMBED_LAG.set(embeds.lag_seconds)
