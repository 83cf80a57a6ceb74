"""Backoff and retry policies, for loops that retry until a dependency answers.

A ``RetryPolicy`` says which failures are worth another try and how long to pause between
tries, the way redis-py's ``Retry(backoff, errors)`` is handed to a client: the stream
consumers, the run's writes, the event subscription and the outbound clients each take one
rather than deciding for themselves.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["Backoff", "RetryPolicy"]

T = TypeVar("T")


class Backoff:
    """Each ``wait`` sleeps the current delay (±50% jitter), then doubles it up to ``cap``."""

    def __init__(self, first: float = 0.2, cap: float = 30.0) -> None:
        self.first, self.cap = first, cap
        self._delay = first

    async def wait(self) -> None:
        await asyncio.sleep(self.next())

    def next(self) -> float:
        """The current delay (with jitter), doubling the next: for waits that may end early."""
        delay = self._delay * random.uniform(0.5, 1.5)
        self._delay = min(self._delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        """Start again from the first delay (the dependency answered)."""
        self._delay = self.first

    def fresh(self) -> Backoff:
        """A backoff with the same delays, from the first."""
        return Backoff(self.first, self.cap)


@dataclass(frozen=True)
class RetryPolicy:
    """Which failures are retried (exception types, or a test of the exception) and the
    pauses between tries (``backoff``: its first delay and cap; every loop or call starts
    from a fresh copy)."""

    backoff: Backoff
    retryable: tuple[type[BaseException], ...] | Callable[[BaseException], bool]

    def retries(self, exc: BaseException) -> bool:
        """Whether ``exc`` is worth another try."""
        if isinstance(self.retryable, tuple):
            return isinstance(exc, self.retryable)
        return self.retryable(exc)

    def pauses(self) -> Backoff:
        """The pauses of one loop, from the first."""
        return self.backoff.fresh()

    async def call(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        within: float | None = None,
        on_retry: Callable[[BaseException], None] | None = None,
    ) -> T:
        """``call()``, tried again after each retryable failure (``on_retry`` is told of it)
        for up to ``within`` seconds (None: until it succeeds); any other failure, or one
        past the deadline, is raised."""
        deadline = None if within is None else time.monotonic() + within
        pauses = None  # made at the first failure: most calls succeed at once
        while True:
            try:
                return await call()
            except Exception as exc:
                if not self.retries(exc):
                    raise
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                if on_retry is not None:
                    on_retry(exc)
            if pauses is None:
                pauses = self.pauses()
            await pauses.wait()
