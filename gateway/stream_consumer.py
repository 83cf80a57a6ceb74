"""The consumer of a job stream: the one loop behind the run queue, the indexer, the
long-term memory outbox and the push deliverer.

A ``StreamConsumer`` reads entries as this process's consumer of the stream's group, as
many as it has ``room`` for, and hands them to ``handle``. Every entry it holds keeps its
lease: one heartbeat renews them all every third of the lease, until the consumer lets the
entry go (``let_go``), having acknowledged it, dead-lettered it, or given up on it. An
entry let go unacknowledged stays pending, and maintenance requeues it (then dead-letters
it) once its lease runs out; so does every entry of a process that dies. While reads fail
the loop pauses per its ``RetryPolicy`` (by default: Redis unavailable, backoff from 50 ms
to 2 s); a failure it does not retry is logged and paused on too, so a bad entry cannot
stop the loop. A stopping consumer leaves the group, handing what it still holds to the
group's reclaimer.

``BatchConsumer`` handles one batch at a time in the loop, holding it while it works.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable

from gateway.backoff import Backoff, RetryPolicy
from gateway.errors import GatewayError
from gateway.store.jobs import Entry, JobStore

__all__ = ["READ_RETRY", "BatchConsumer", "StreamConsumer"]

log = logging.getLogger("gateway.workers")

# How a consumer's reads (and its handlers' acknowledgements) ride out a Redis outage.
READ_RETRY = RetryPolicy(Backoff(0.05, 2.0), (GatewayError,))


class StreamConsumer(ABC):
    name = "stream-consumer"

    def __init__(
        self,
        jobs: JobStore,
        *,
        consumer: str,
        block_ms: int,
        lease_seconds: float,
        retry: RetryPolicy = READ_RETRY,
    ) -> None:
        self.jobs, self.consumer = jobs, consumer
        self._block_ms, self._lease, self.read_retry = block_ms, lease_seconds, retry
        self.held: set[str] = set()  # entries whose lease this consumer renews
        self._room = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._closing = False

    # -- what a consumer does ---------------------------------------------------------------

    @abstractmethod
    def room(self) -> int:
        """How many entries to read now (0: none until ``wake``)."""

    @abstractmethod
    async def handle(self, entries: list[Entry]) -> None:
        """Take the entries read (held until let go)."""

    async def read(self, count: int) -> list[Entry]:
        """The next entries, up to ``count`` (waits up to the block time for the first)."""
        return await self.jobs.read(self.consumer, count, self._block_ms)

    async def drain(self, grace_seconds: float) -> None:
        """Stopping, after the last read: end or cut short what is under way (nothing is,
        by default: a batch in hand is cut short with the read loop)."""
        return None

    # -- holding entries ----------------------------------------------------------------------

    def hold(self, entries: Iterable[str]) -> None:
        """Keep renewing these entries' lease."""
        self.held.update(entries)

    def let_go(self, entries: Iterable[str]) -> None:
        """Stop renewing these entries' lease, and make room for more."""
        self.held.difference_update(entries)
        self.wake()

    def wake(self) -> None:
        """There may be room to read again."""
        self._room.set()

    async def settle(self, entry: str, fields: dict[bytes, bytes], reason: str = "") -> None:
        """Acknowledge an entry (or, with a ``reason``, dead-letter it) and let it go; retried
        through a Redis outage."""
        if reason:
            await self.read_retry.call(lambda: self.jobs.dead_letter(entry, fields, reason))
        else:
            await self.read_retry.call(lambda: self.jobs.ack([entry]))
        self.let_go([entry])

    # -- the loop -----------------------------------------------------------------------------

    async def start(self) -> None:
        with contextlib.suppress(GatewayError):
            await self.jobs.ensure_group()
        self._reader = asyncio.create_task(self._read_loop(), name=self.name)
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name=f"{self.name}-lease")

    async def stop(self, grace_seconds: float = 0.0) -> None:
        """Read no more, let what is under way end within ``grace_seconds`` (``drain``), and
        leave the group; what is still held stays pending."""
        self._closing = True
        self.wake()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.wait({self._reader}, timeout=5.0)
        await self.drain(grace_seconds)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.wait({self._heartbeat}, timeout=5.0)
            with contextlib.suppress(GatewayError):  # what it still holds stays pending
                await self.jobs.leave(self.consumer)

    async def _read_loop(self) -> None:
        pauses = self.read_retry.pauses()
        while not self._closing:
            room = self.room()
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                entries = await self.read(room)
                if entries:
                    self.hold(entry for entry, _ in entries)
                    await self.handle(entries)
            except Exception as exc:
                self._failed("batch failed", exc)
                await pauses.wait()
                try:  # the stream may have gone with its group (a fresh Redis)
                    await self.jobs.ensure_group()
                except Exception as again:
                    self._failed("consumer group not made", again)
                continue
            pauses.reset()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._lease / 3)
            if self.held:
                try:
                    await self.jobs.heartbeat(self.consumer, list(self.held))
                except Exception as exc:  # the next beat tries again
                    self._failed("lease renewal failed", exc)

    def _failed(self, what: str, exc: Exception) -> None:
        """A failure of the loops, which go on: a Redis away is expected (``read_retry``),
        anything else is logged (a defect must not stop them)."""
        if not self.read_retry.retries(exc):
            log.error(what, extra={"worker": self.name, "error": type(exc).__name__})


class BatchConsumer(StreamConsumer):
    """Handles a batch at a time: reads up to ``batch`` entries, ``process``es them while
    holding their lease, then lets them go (acknowledging them is ``process``'s work; a
    batch that fails stays pending)."""

    def __init__(
        self,
        jobs: JobStore,
        *,
        consumer: str,
        batch: int,
        block_ms: int,
        lease_seconds: float,
        retry: RetryPolicy = READ_RETRY,
    ) -> None:
        super().__init__(
            jobs, consumer=consumer, block_ms=block_ms, lease_seconds=lease_seconds, retry=retry
        )
        self.batch = batch

    def room(self) -> int:
        return self.batch

    @abstractmethod
    async def process(self, entries: list[Entry]) -> None:
        """Do the batch's work; acknowledging (or dead-lettering) its entries is part of it."""

    async def handle(self, entries: list[Entry]) -> None:
        try:
            await self.process(entries)
        finally:
            self.let_go(entry for entry, _ in entries)
