"""Timestamps as the gateway shows them: ISO 8601 UTC with milliseconds."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from gateway.clock import iso_from_ms, now_ms


def test_stamps_are_iso_8601_utc_with_milliseconds() -> None:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    rng = random.Random(3)
    samples = [0, 1, 999, 1_000, 1_767_225_599_999, 1_767_225_600_000, now_ms()]
    samples += [rng.randrange(0, 7_258_118_400_000) for _ in range(2_000)]  # up to 2200
    for ms in samples:
        expected = (epoch + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")
        assert iso_from_ms(ms) == expected.replace("+00:00", "Z"), ms
    assert iso_from_ms(1_767_225_600_123) == "2026-01-01T00:00:00.123Z"
