"""The in-process run queue: runs in this process, no durability.

Fastest, and the baseline the durable queue is measured against. Jobs accepted
but not yet run are lost if the process dies (their tasks stay ``submitted``); on
an orderly shutdown they end ``failed``. Select it with ``GATEWAY_QUEUE=memory``.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.engine.executor import SHUTDOWN_TEXT, RunExecutor
from gateway.engine.runs import RunJob
from gateway.errors import StoreUnavailableError

__all__ = ["InProcessQueue"]


class InProcessQueue:
    durable = False

    def __init__(self, executor: RunExecutor, concurrency: int) -> None:
        self._executor, self._concurrency = executor, concurrency
        self._queue: asyncio.Queue[RunJob] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._closing = False
        # A run that settles while messages wait for its task queues the next one here.
        executor.next_runs.queue_here = self._queue.put_nowait

    def claimant(self) -> str:
        return ""

    def release(self) -> None:
        """Nothing is ever reserved."""

    def adopt(self, entry: str, fields: dict[bytes, bytes]) -> None:
        raise RuntimeError("the in-process queue never takes stream jobs (it names no claimant)")

    async def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(), name=f"runner-{i}") for i in range(self._concurrency)
        ]

    async def enqueue(self, job: RunJob) -> None:
        if self._closing:
            raise StoreUnavailableError("The gateway is shutting down; retry later")
        self._queue.put_nowait(job)

    async def stop(self, grace_seconds: float) -> None:
        self._closing = self._executor.closing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace_seconds)
        for worker in self._workers:
            worker.cancel()
        if self._workers:
            await asyncio.wait(self._workers, timeout=5.0)
        while not self._queue.empty():
            job = self._queue.get_nowait()
            self._queue.task_done()
            await self._executor.fail(job, SHUTDOWN_TEXT)

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            try:
                await self._executor.execute(job)
            finally:
                self._queue.task_done()
