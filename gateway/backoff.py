"""Exponential backoff with jitter, for loops that retry until a dependency answers."""

from __future__ import annotations

import asyncio
import random

__all__ = ["Backoff"]


class Backoff:
    """Each ``wait`` sleeps the current delay (±50% jitter), then doubles it up to ``cap``."""

    def __init__(self, first: float = 0.2, cap: float = 30.0) -> None:
        self._delay, self._cap = first, cap

    async def wait(self) -> None:
        await asyncio.sleep(self.next())

    def next(self) -> float:
        """The current delay (with jitter), doubling the next: for waits that may end early."""
        delay = self._delay * random.uniform(0.5, 1.5)
        self._delay = min(self._delay * 2, self._cap)
        return delay
