"""The wall clock as the gateway stores it: milliseconds since the epoch, shown as ISO 8601
UTC with milliseconds (``2026-01-01T00:00:00.000Z``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["iso_from_ms", "now_ms"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso_from_ms(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")
