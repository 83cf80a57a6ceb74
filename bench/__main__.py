"""`make bench`: the gateway against a floor and a ceiling measured in the same run, interleaved.

Prints throughput and latency of blocking echo sends at concurrency 1 and 32 next
to a bare Starlette + one-Redis-pipeline endpoint (the floor) and a bare Starlette
endpoint answering a constant JSON (the ceiling), append and page latency at small vs
large contexts, Redis bytes per stored message against its JSON size, the gateway's
peak RSS under load, the queue variants, context memory (``memory``: indexing and search),
background embedding (``embedding``: on vs off, searchable delay, ``consistency=wait``
search, batch costs), long-term memory, and the cost of authentication modes, the audit
trail and rate limits (``auth``), and streaming (``streaming``: time to first event,
events/s, idle subscribers).

Every section records its figures into ``bench.report.REPORT``; the end prints each
target with its measured value and pass/miss, the total duration, and writes
``report.json`` and ``report.png`` to ``BENCH_OUT`` (default ``.data/bench``).
Knobs: ``BENCH_ROUNDS``, ``BENCH_SECONDS``, ``BENCH_ONLY`` (comma-separated sections),
``BENCH_OUT``, ``BENCH_STRICT=1`` (exit 1 when a target is missed).
"""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.harness import ROUNDS, SECONDS
from bench.report import REPORT, write

# The sections in the order they run: each one's module and the function measuring it,
# given the run's temporary directory. A module is imported only when its section runs.
SECTIONS: dict[str, tuple[str, str]] = {
    "core": ("bench.core", "core_bench"),
    "bindings": ("bench.bindings", "bindings_bench"),
    "queues": ("bench.queues", "queues_bench"),
    "memory": ("bench.memory", "memory_bench"),
    "embedding": ("bench.embedding", "embedding_section"),
    "longterm": ("bench.longterm", "longterm_bench"),
    "scale": ("bench.scale", "scale_bench"),
    "auth": ("bench.auth", "auth_bench"),
    "encryption": ("bench.encryption", "encryption_bench"),
    "streaming": ("bench.streaming", "streaming_bench"),
    "push": ("bench.push", "push_bench"),
    "replicas": ("bench.replicas", "replicas_bench"),
}
OUT = Path(os.environ.get("BENCH_OUT") or Path(__file__).resolve().parent.parent / ".data/bench")


def selected() -> list[str]:
    """The sections BENCH_ONLY names (comma-separated), in their order; all when unset."""
    only = {name.strip() for name in os.environ.get("BENCH_ONLY", "").split(",") if name.strip()}
    if unknown := only - set(SECTIONS):
        raise SystemExit(
            f"BENCH_ONLY: unknown section {', '.join(sorted(unknown))} "
            f"(sections: {', '.join(SECTIONS)})"
        )
    return [name for name in SECTIONS if not only or name in only]


def settings(sections: list[str], strict: bool) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
        check=False,
    ).stdout.strip()
    return {
        "rounds": ROUNDS,
        "seconds": SECONDS,
        "only": ",".join(sections) if len(sections) < len(SECTIONS) else "",
        "strict": strict,
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit or None,
    }


def main() -> None:
    sections = selected()
    strict = os.environ.get("BENCH_STRICT") == "1"
    started = time.monotonic()
    REPORT.started = datetime.now().astimezone().isoformat(timespec="seconds")
    REPORT.settings = settings(sections, strict)
    with tempfile.TemporaryDirectory() as tmp:
        for name in sections:
            section_started = time.monotonic()
            module, function = SECTIONS[name]
            run: Callable[[Path], None] = getattr(importlib.import_module(module), function)
            run(Path(tmp))
            REPORT.sections[name] = round(time.monotonic() - section_started, 1)
    REPORT.duration_seconds = round(time.monotonic() - started, 1)
    json_path, png_path = write(REPORT, OUT)
    misses = REPORT.misses
    print(f"\ntargets: {len(REPORT.targets) - len(misses)} met, {len(misses)} missed")
    print(REPORT.table())
    minutes, seconds = divmod(REPORT.duration_seconds, 60)
    print(f"total duration: {minutes:.0f} min {seconds:.0f} s ({', '.join(sections)})")
    print(f"report: {json_path}\nchart:  {png_path}")
    if misses and strict:
        sys.exit(1)
    if misses:
        print("a missed target does not fail `make bench`; BENCH_STRICT=1 makes it exit 1")


if __name__ == "__main__":
    main()
