"""Writing the audit trail behind the requests, in batches.

``commit`` appends an entry to a buffer and waits until the batch it went into is written;
one task writes whatever has gathered in one pipeline (``AuditStore.append``) and, when
configured, as JSON lines to a file or stdout for a SIEM. While a batch is being written the
next one gathers, so under load many entries share one round trip (a group commit). The
edges hold a response's end until its entry is written (``http/audit.py``, ``grpcapi``), so
a crash of the gateway loses no entry of a request that was answered. ``record`` appends
without waiting (a request that ends without an answer). A batch that cannot be written
(Redis unreachable) is kept and retried, up to ``max_buffered`` entries; ``commit`` gives
the error that kept it out, and the edge answers with it (a 503) rather than report
unaudited work done.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import IO

import orjson

from gateway.audit.entry import AuditEntry, record_of
from gateway.canonical import audit_record_json
from gateway.errors import GatewayError, StoreUnavailableError
from gateway.store.audit_store import AuditStore

__all__ = ["AuditLog"]

log = logging.getLogger("gateway.audit")
_RETRY_SECONDS = 1.0


class AuditLog:
    def __init__(
        self, store: AuditStore, mirror: str | None = None, max_buffered: int = 100_000
    ) -> None:
        self.store, self._mirror_to, self._max = store, mirror, max_buffered
        self._buffer: list[AuditEntry] = []
        self._pending: list[AuditEntry] = []  # mirrored, not yet in Redis
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._mirror: IO[str] | None = None
        self._lock = asyncio.Lock()
        self._closing = False
        # One future per commit waiting on the batch gathering now, each told when that batch
        # is written (None) or why it could not be: its own, so a caller that gives up cancels
        # only its own wait (a shared one would have to be shielded, at ~3 loop callbacks
        # more per commit).
        self._gathering: list[asyncio.Future[GatewayError | None]] = []
        self.dropped = 0

    def record(self, entry: AuditEntry) -> None:
        if len(self._buffer) >= self._max:
            self.dropped += 1
            return
        self._buffer.append(entry)
        self._wake.set()

    async def commit(self, entry: AuditEntry) -> GatewayError | None:
        """Append ``entry`` and wait until its batch is written: None once it is, else the
        error that kept it out (it is kept and retried, as every entry not yet written)."""
        if self._task is None or self._task.done() or len(self._buffer) >= self._max:
            self.record(entry)
            return StoreUnavailableError()
        self._buffer.append(entry)
        written: asyncio.Future[GatewayError | None] = asyncio.get_running_loop().create_future()
        self._gathering.append(written)
        self._wake.set()
        return await written

    def start(self) -> None:
        if self._mirror_to and self._mirror_to != "stdout":
            self._mirror = open(self._mirror_to, "a", encoding="utf-8")  # noqa: SIM115
        elif self._mirror_to == "stdout":
            self._mirror = sys.stdout
        self._task = asyncio.create_task(self._run(), name="audit-writer")

    async def stop(self) -> None:
        """Write what is left and stop. The writer is not cancelled mid-write (a pipeline
        cancelled while it executes may never give its connection back): it is told to
        finish, and does after one more attempt."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
        if self._mirror is not None and self._mirror is not sys.stdout:
            self._mirror.close()

    async def flush(self) -> None:
        """Write what is buffered now (also what shutdown waits for)."""
        async with self._lock:
            await self._flush()

    async def _flush(self) -> None:
        batch, self._buffer = self._buffer, []
        gathered, self._gathering = self._gathering, []
        try:
            self._write_mirror(batch)
            self._pending += batch
            if len(self._pending) > self._max:
                self.dropped += len(self._pending) - self._max
                del self._pending[: len(self._pending) - self._max]
            if self._pending:
                await self.store.append(self._pending)
                self._pending = []
        except BaseException as exc:
            _settle(gathered, exc if isinstance(exc, GatewayError) else StoreUnavailableError())
            raise
        _settle(gathered, None)

    def _write_mirror(self, batch: list[AuditEntry]) -> None:
        if self._mirror is None or not batch:
            return
        lines = [orjson.dumps(audit_record_json(record_of("", e.fields()))).decode() for e in batch]
        self._mirror.write("\n".join(lines) + "\n")
        self._mirror.flush()

    async def _run(self) -> None:
        try:
            await self._write_until_closed()
        finally:  # nobody waits on a batch that will not be written now
            _settle(self._gathering, StoreUnavailableError())
            self._gathering = []

    async def _write_until_closed(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except Exception as exc:
                log.warning("audit entries not written yet", extra={"error": type(exc).__name__})
                if self._closing:
                    return
                await asyncio.sleep(_RETRY_SECONDS)
                self._wake.set()
            if self._closing:
                return


def _settle(
    waiting: list[asyncio.Future[GatewayError | None]], failure: GatewayError | None
) -> None:
    for written in waiting:
        if not written.done():  # its caller gave up (cancelled)
            written.set_result(failure)
