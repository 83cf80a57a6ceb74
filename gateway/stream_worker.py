"""A background loop over one job stream, shared by the indexer and the outbox.

It reads batches as this process's consumer and hands them to ``handle``, renewing the
batch's lease while it works: a handler that waits out an outage of the service behind
it (embedder, Cortadel) keeps its entries, and maintenance neither requeues nor
dead-letters them. While Redis (or that service, per ``transient``) fails, the loop backs
off; a batch that fails stays pending, and maintenance requeues it (then dead-letters it)
after the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod

from gateway.errors import GatewayError
from gateway.store.jobs import Entry, JobStore

__all__ = ["StreamWorker"]

log = logging.getLogger("gateway.workers")


class StreamWorker(ABC):
    name = "stream-worker"
    transient: tuple[type[BaseException], ...] = (GatewayError,)

    def __init__(
        self, jobs: JobStore, *, consumer: str, batch: int, block_ms: int, lease_seconds: float
    ) -> None:
        self._jobs, self._consumer = jobs, consumer
        self._batch, self._block_ms, self._lease = batch, block_ms, lease_seconds
        self._loop: asyncio.Task[None] | None = None
        self._closing = False

    async def start(self) -> None:
        with contextlib.suppress(GatewayError):
            await self._jobs.ensure_group()
        self._loop = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Stop reading and leave the consumer group; a batch cut short stays pending."""
        self._closing = True
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.wait({self._loop}, timeout=5.0)
            with contextlib.suppress(GatewayError):
                await self._jobs.leave(self._consumer)

    async def read(self) -> list[Entry]:
        """The next batch (waits up to the block time for its first entry)."""
        return await self._jobs.read(self._consumer, self._batch, self._block_ms)

    @abstractmethod
    async def handle(self, entries: list[Entry]) -> None:
        """Do the batch's work; acknowledging (or dead-lettering) its entries is part of it."""

    async def _leased(self, entries: list[Entry]) -> None:
        """``handle`` the batch while renewing its entries' lease."""
        ids = [entry for entry, _ in entries]

        async def renew() -> None:
            while True:
                await asyncio.sleep(self._lease / 3)
                with contextlib.suppress(GatewayError):
                    await self._jobs.heartbeat(self._consumer, ids)

        renewing = asyncio.create_task(renew())
        try:
            await self.handle(entries)
        finally:
            renewing.cancel()

    async def _run(self) -> None:
        pause = 0.05
        while not self._closing:
            try:
                entries = await self.read()
                if entries:
                    await self._leased(entries)
                pause = 0.05
            except self.transient:
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
            except Exception as exc:  # a malformed job must not stop the loop
                log.error("batch failed", extra={"worker": self.name, "error": type(exc).__name__})
                await asyncio.sleep(pause)
