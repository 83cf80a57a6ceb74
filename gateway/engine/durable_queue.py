"""The durable queue: runs are jobs on a Redis Stream read by a consumer group.

The send script writes each job together with its message, so an accepted message
always has its run queued. Workers (in ``gateway serve`` or ``gateway worker``)
read jobs through the stream consumer (``stream_consumer.py``), which keeps their leases
alive with heartbeats while they run, and the write that stores a run's outcome
acknowledges its job. A worker that dies leaves its jobs pending; maintenance puts them
back in the queue after the lease (``GATEWAY_JOB_LEASE_SECONDS``) and the next attempt,
fenced, rolls back whatever the dead one had half written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gateway import metrics
from gateway.engine.executor import RunExecutor
from gateway.engine.runs import RunJob
from gateway.errors import GatewayError
from gateway.store.jobs import Entry, JobStore
from gateway.stream_consumer import StreamConsumer

__all__ = ["DurableQueue"]

log = logging.getLogger("gateway.jobs")


class DurableQueue(StreamConsumer):
    durable = True
    name = "jobs-reader"

    def __init__(
        self,
        jobs: JobStore,
        executor: RunExecutor,
        *,
        consumer: str,
        concurrency: int,
        lease_seconds: float,
        block_ms: int,
        workers: bool = True,
    ) -> None:
        super().__init__(jobs, consumer=consumer, block_ms=block_ms, lease_seconds=lease_seconds)
        self._executor, self._concurrency, self._workers = executor, concurrency, workers
        self._running: dict[str, asyncio.Task[None]] = {}
        self._reserved = 0

    def room(self) -> int:
        return self._concurrency - len(self._running) - self._reserved

    def claimant(self) -> str:
        if not self._workers or self._closing or self.room() <= 0:
            return ""
        self._reserved += 1
        return self.consumer

    def release(self) -> None:
        self._reserved -= 1
        self.wake()

    def adopt(self, entry: str, fields: dict[bytes, bytes]) -> None:
        self._reserved -= 1
        self.hold([entry])
        self._spawn(entry, fields)

    async def enqueue(self, job: RunJob) -> None:
        """Run a job this process claimed at send time; any other job is already queued
        by the send script, with its message."""
        if job.entry and job.attempt:
            self._reserved -= 1
            self.hold([job.entry])
            self._start(job)

    async def start(self) -> None:
        if self._workers:
            await super().start()
        else:
            with contextlib.suppress(GatewayError):
                await self.jobs.ensure_group()

    async def handle(self, entries: list[Entry]) -> None:
        for entry, fields in entries:
            self._spawn(entry, fields)

    async def drain(self, grace_seconds: float) -> None:
        """Let running jobs finish within the grace period, then cut the rest short: they
        stay pending for another worker."""
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=grace_seconds)
        self._executor.closing = True
        for task in list(self._running.values()):
            task.cancel()
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=5.0)

    def _spawn(self, entry: str, fields: dict[bytes, bytes]) -> None:
        try:
            job = RunJob.from_wire(fields, entry).taken_by(self.consumer, entry)
        except (KeyError, ValueError, TypeError):
            log.error("malformed job entry", extra={"entry": entry})
            self._track(entry, asyncio.create_task(self.settle(entry, fields, "malformed")))
        else:
            self._start(job)

    def _start(self, job: RunJob) -> None:
        queued_ms = int(job.entry.split("-", 1)[0])
        metrics.JOB_WAIT_SECONDS.observe(max(0.0, time.time() - queued_ms / 1000))
        self._track(job.entry, asyncio.create_task(self._executor.execute(job)))

    def _track(self, entry: str, task: asyncio.Task[None]) -> None:
        self._running[entry] = task
        task.add_done_callback(lambda _: self._done(entry))

    def _done(self, entry: str) -> None:
        self._running.pop(entry, None)
        self.let_go([entry])
