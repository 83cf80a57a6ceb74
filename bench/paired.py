"""Two builds of the gateway side by side: ``python -m bench.paired CHECKOUT [KEY=VALUE ...]``.

On a shared machine a server's CPU per request moves by 10-20% between runs a few minutes
apart, so two builds measured one after the other cannot be told apart when they differ by
a few percent. Here both run at once, each on its own embedded Redis: ``CHECKOUT`` (another
checkout's root) as A and this tree as B, each process started in its own tree, so each
imports its own ``gateway`` (``python -m`` puts the working directory first on the path: a
``PYTHONPATH`` would not do; each side's package is checked before the runs), and runs on
its own interpreter: the tree's ``.venv/bin/python`` when it has one, so two venvs (other
dependencies, another interpreter; the Redis servers are both this environment's) compare
as well as two commits. They take short bursts
of blocking echo sends in turn, A then B, then B then A, and each pair gives B/A of CPU per
request, throughput and median latency; what the machine does meanwhile weighs on both
sides of a pair alike. Prints each pair and the mean of the ratios with its standard error;
the Redis CPU per request of each side is its own Redis's (what a change to the Lua scripts
shows in).

Knobs (environment): ``PAIRED_PAIRS`` (12), ``PAIRED_SECONDS`` per burst (1.5),
``PAIRED_CONCURRENCY`` (32). ``KEY=VALUE`` arguments go to both gateways' environment.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from redis import Redis

from bench import loadgen
from bench.harness import (
    Served,
    cpu_seconds,
    in_turn,
    interpreter,
    one_gateway,
    posts,
    send_body,
    wait_for_indexer,
)

PAIRS = int(os.environ.get("PAIRED_PAIRS", "12"))
SECONDS = float(os.environ.get("PAIRED_SECONDS", "1.5"))
CONCURRENCY = int(os.environ.get("PAIRED_CONCURRENCY", "32"))


class Burst(NamedTuple):
    cpu_us: float  # the gateway's CPU per request
    redis_us: float  # its Redis's CPU per request
    throughput: float  # requests per second, until its embedding stream is empty
    p50_ms: float


def burst(g: Served, redis: Redis, counter: itertools.count[int]) -> Burst:
    redis_pid = int(redis.info("server")["process_id"])
    cpu, redis_cpu = cpu_seconds(g.pid), cpu_seconds(redis_pid)
    started = time.perf_counter()
    sends = posts("/v1/message:send", send_body)
    result = asyncio.run(loadgen.run(g.port, sends, CONCURRENCY, SECONDS, counter))
    wait_for_indexer(redis)
    n = len(result.latencies)
    seconds = time.perf_counter() - started
    return Burst(
        1e6 * (cpu_seconds(g.pid) - cpu) / n,
        1e6 * (cpu_seconds(redis_pid) - redis_cpu) / n,
        n / seconds,
        result.pct(0.5),
    )


def imported_from(tree: Path) -> Path:
    """Where ``gateway`` comes from for a process started in ``tree`` as the gateways are."""
    out = subprocess.run(
        [interpreter(tree), "-c", "import gateway; print(gateway.__file__)"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip()).resolve().parents[1]


def mean_and_error(values: list[float]) -> str:
    error = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return f"{statistics.mean(values):.3f} ± {error:.3f}"


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    trees = {"A": Path(sys.argv[1]).resolve(), "B": Path(__file__).resolve().parents[1]}
    for name, tree in trees.items():
        if imported_from(tree) != tree:
            raise SystemExit(f"{name} would not serve {tree}: it imports {imported_from(tree)}")
        print(f"{name}: {tree}, served by {interpreter(tree)}")
    if trees["A"] == trees["B"]:
        print("A and B are the same tree: an A/A run")
    env = dict(a.split("=", 1) for a in sys.argv[2:] if "=" in a)
    counter = itertools.count()
    pairs: list[dict[str, Burst]] = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        one_gateway(Path(tmp), "a", env, trees["A"]) as a,
        one_gateway(Path(tmp), "b", env, trees["B"]) as b,
    ):
        sides = {"A": (a, Redis.from_url(a.redis_url)), "B": (b, Redis.from_url(b.redis_url))}
        for g, redis in sides.values():  # warm-up
            burst(g, redis, counter)
        for n in range(PAIRS):
            pair = {name: burst(*sides[name], counter) for name in in_turn(("A", "B"), n)}
            pairs.append(pair)
            ra, rb = pair["A"], pair["B"]
            print(
                f"A {ra.cpu_us:6.0f} µs/req (Redis {ra.redis_us:4.0f}) {ra.throughput:6.0f} req/s"
                f" p50 {ra.p50_ms:6.2f} ms | B {rb.cpu_us:6.0f} µs/req (Redis {rb.redis_us:4.0f})"
                f" {rb.throughput:6.0f} req/s p50 {rb.p50_ms:6.2f} ms",
                flush=True,
            )

    def b_over_a(field: str) -> str:
        return mean_and_error([getattr(p["B"], field) / getattr(p["A"], field) for p in pairs])

    print(
        f"B/A over {len(pairs)} pairs (mean ± standard error): CPU per request "
        f"{b_over_a('cpu_us')}, Redis CPU per request {b_over_a('redis_us')}, "
        f"throughput {b_over_a('throughput')}, p50 {b_over_a('p50_ms')}"
    )


if __name__ == "__main__":
    main()
