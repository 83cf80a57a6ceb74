"""The wall clock as the gateway stores it: milliseconds since the epoch, shown as ISO 8601
UTC with milliseconds (``2026-01-01T00:00:00.000Z``)."""

from __future__ import annotations

import functools
import time

__all__ = ["iso_from_ms", "now_ms"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@functools.lru_cache(maxsize=16)
def _second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def iso_from_ms(ms: int) -> str:
    """A send stamps its task two or three times, within the same second mostly: the second
    is formatted once (~2 µs a stamp instead of ~6 through ``datetime``), in integers."""
    seconds, millis = divmod(ms, 1000)
    return f"{_second(seconds)}.{millis:03d}Z"
