"""The garbage collector of a long-running gateway process: its pauses measured, its heap
of start-up objects kept out of its scans.

A full collection scans every tracked object. Once started, a gateway process holds a large
heap that lives as long as it does (modules, pydantic models, clients, the app); under load
full collections scanned it again and again, each a pause of tens of milliseconds in the
middle of requests (see docs/performance.md, "Garbage collector"). ``settle()`` moves that heap
to the permanent generation (``gc.freeze()``) once start-up is over, and raises the
threshold of the youngest generation so the many short-lived objects of a request die
between collections instead of being promoted. ``watch()`` records every collection's pause
in ``gateway_gc_pause_seconds``, by generation.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from gateway import metrics

__all__ = ["THRESHOLDS", "settle", "watch"]

# Generation 0 collects after this many net allocations of tracked objects (CPython's default
# is 700): a request allocates a few thousand, so the default collects several times per
# request and promotes what is merely in flight. Generations 1 and 2 keep their defaults.
THRESHOLDS = (10_000, 10, 10)

_started: list[float] = []
_watching = False


def _on_collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _started.append(time.perf_counter())
    elif _started:
        paused = time.perf_counter() - _started.pop()
        metrics.series(metrics.GC_PAUSE_SECONDS, str(info["generation"])).observe(paused)


def watch() -> None:
    """Record the pause of every collection from now on (once per process)."""
    global _watching
    if not _watching:
        gc.callbacks.append(_on_collection)
        _watching = True


def settle() -> None:
    """Start-up is over: collect once, freeze what survives, and apply ``THRESHOLDS``."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
