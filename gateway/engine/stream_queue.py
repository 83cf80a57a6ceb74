"""The durable queue: runs are jobs on a Redis Stream read by a consumer group.

The send script writes each job together with its message, so an accepted message
always has its run queued. Workers (in ``gateway serve`` or ``gateway worker``)
read jobs, keep their leases alive with heartbeats while running them, and the
write that stores a run's outcome acknowledges its job. A worker that dies leaves
its jobs pending; maintenance puts them back in the queue after the lease
(``GATEWAY_JOB_LEASE_SECONDS``) and the next attempt, fenced, rolls back whatever
the dead one had half written.
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
from gateway.store.jobs import JobStore

__all__ = ["StreamQueue"]

log = logging.getLogger("gateway.jobs")


class StreamQueue:
    durable = True

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
        self._jobs, self._executor = jobs, executor
        self.consumer, self._concurrency = consumer, concurrency
        self._lease, self._block_ms, self._workers = lease_seconds, block_ms, workers
        self._running: dict[str, asyncio.Task[None]] = {}
        self._reserved = 0
        self._slot = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._closing = False

    def claimant(self) -> str:
        if not self._workers or self._closing:
            return ""
        if len(self._running) + self._reserved >= self._concurrency:
            return ""
        self._reserved += 1
        return self.consumer

    def release(self) -> None:
        self._reserved -= 1
        self._slot.set()

    def adopt(self, entry: str, fields: dict[bytes, bytes]) -> None:
        self._reserved -= 1
        self._spawn(entry, fields)

    async def enqueue(self, job: RunJob) -> None:
        """Run a job this process claimed at send time; any other job is already queued
        by the send script, with its message."""
        if job.entry and job.attempt:
            self._reserved -= 1
            self._start(job)

    async def start(self) -> None:
        with contextlib.suppress(GatewayError):
            await self._jobs.ensure_group()
        if self._workers:
            self._loops = [
                asyncio.create_task(self._read_loop(), name="jobs-reader"),
                asyncio.create_task(self._heartbeat_loop(), name="jobs-heartbeat"),
            ]

    async def stop(self, grace_seconds: float) -> None:
        """Take no new jobs, let running ones finish within the grace period, and leave the
        rest pending for another worker; then leave the consumer group."""
        self._closing = True
        self._slot.set()
        if self._loops:
            self._loops[0].cancel()
            await asyncio.wait(self._loops[:1], timeout=5.0)
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=grace_seconds)
        self._executor.closing = True
        for task in list(self._running.values()):
            task.cancel()
        if self._running:
            await asyncio.wait(list(self._running.values()), timeout=5.0)
        for loop in self._loops[1:]:
            loop.cancel()
        if self._loops:
            await asyncio.wait(self._loops, timeout=5.0)
            with contextlib.suppress(GatewayError):  # its unfinished jobs stay pending
                await self._jobs.leave(self.consumer)

    async def _read_loop(self) -> None:
        backoff = 0.05
        while not self._closing:
            free = self._concurrency - len(self._running) - self._reserved
            if free <= 0:
                self._slot.clear()
                await self._slot.wait()
                continue
            try:
                batch = await self._jobs.read(self.consumer, free, self._block_ms)
            except GatewayError:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                with contextlib.suppress(GatewayError):
                    await self._jobs.ensure_group()
                continue
            backoff = 0.05
            for entry, fields in batch:
                self._spawn(entry, fields)

    def _spawn(self, entry: str, fields: dict[bytes, bytes]) -> None:
        task: asyncio.Task[None]
        try:
            job = RunJob.from_wire(fields, entry).taken_by(self.consumer, entry)
        except (KeyError, ValueError, TypeError):
            log.error("malformed job entry", extra={"entry": entry})
            task = asyncio.create_task(self._reject(entry, fields))
        else:
            self._start(job)
            return
        self._running[entry] = task
        task.add_done_callback(lambda _: self._done(entry))

    def _start(self, job: RunJob) -> None:
        queued_ms = int(job.entry.split("-", 1)[0])
        metrics.JOB_WAIT_SECONDS.observe(max(0.0, time.time() - queued_ms / 1000))
        task = asyncio.create_task(self._executor.execute(job))
        self._running[job.entry] = task
        task.add_done_callback(lambda _: self._done(job.entry))

    async def _reject(self, entry: str, fields: dict[bytes, bytes]) -> None:
        with contextlib.suppress(GatewayError):
            await self._jobs.dead_letter(entry, fields, "malformed")

    def _done(self, entry: str) -> None:
        self._running.pop(entry, None)
        self._slot.set()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._lease / 3)
            with contextlib.suppress(GatewayError):
                await self._jobs.heartbeat(self.consumer, list(self._running))
