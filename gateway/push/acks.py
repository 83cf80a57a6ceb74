"""Acknowledgements of delivered webhook events, sent together.

Each delivered event is acknowledged (``XACK`` and ``XDEL`` of its entry, one round trip).
While one acknowledgement is under way, those that come meanwhile wait and then go as one
call: under load a round trip acknowledges many events, idle it costs no wait at all. A
caller returns once its entry is acknowledged (until then it keeps its lease); a failing
call is retried per the ``RetryPolicy`` given (the deliverer's: Redis unavailable, with
backoff), the entries kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools

from gateway.backoff import RetryPolicy
from gateway.store.jobs import JobStore

__all__ = ["Acks"]

CLOSE_SECONDS = 5.0


class Acks:
    def __init__(self, jobs: JobStore, retry: RetryPolicy) -> None:
        self._jobs, self._retry = jobs, retry
        self._waiting: list[tuple[str, asyncio.Future[None]]] = []
        self._sending: asyncio.Task[None] | None = None

    async def ack(self, entry: str) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((entry, done))
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send(), name="push-acks")
        await done

    async def _send(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            await self._retry.call(functools.partial(self._jobs.ack, [e for e, _ in batch]))
            for _, done in batch:
                if not done.done():
                    done.set_result(None)

    async def close(self) -> None:
        """Let the acknowledgements under way finish (for at most ``CLOSE_SECONDS``)."""
        if self._sending is not None and not self._sending.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._sending, CLOSE_SECONDS)
