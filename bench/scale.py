"""`make bench` scale (`BENCH_ONLY=scale`): one host's cores, `gateway serve --processes 2`
against one process at c=64."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from pathlib import Path

from bench.harness import ROUNDS, gateway, line, ratio, send_rounds
from bench.report import REPORT
from gateway.embedded_redis import EmbeddedRedis, free_port


def scale_bench(tmp: Path) -> None:
    """One host's cores: `gateway serve --processes 2` against one process, c=64, each on a
    Redis of its own (the gateway as shipped), interleaved."""
    servers = [EmbeddedRedis(tmp / f"redis-scale{i}") for i in range(2)]
    urls = [s.start() for s in servers]
    names = ("1 process", "2 processes (--processes 2)")
    ports = {name: free_port() for name in names}
    try:
        with contextlib.ExitStack() as stack:
            for port, url, extra in zip(
                ports.values(), urls, ([], ["--processes", "2"]), strict=True
            ):
                stack.enter_context(gateway(port, {"REDIS_URL": url}, *extra))
            asyncio.run(_scale(ports))
    finally:
        for s in servers:
            s.stop()


async def _scale(ports: dict[str, int]) -> None:
    merged = await send_rounds(ports, 64, itertools.count(50_000_000))
    cores = os.cpu_count()
    print(
        f"blocking echo message:send, concurrency 64, 1 vs 2 server processes on one port "
        f"({ROUNDS} interleaved rounds, {cores} cores shared with the load generator and Redis)"
    )
    for name, r in merged.items():
        print(line(name, r))
        REPORT.run("message:send, c=64", f"scale: {name}", "gateway", r)
    one, two = merged["1 process"], merged["2 processes (--processes 2)"]
    two_one = ratio(two.throughput, one.throughput)
    print(f"  throughput 2 processes / 1: {two_one:.2f} on {cores} cores")
    REPORT.figure(f"c=64 throughput, 2 processes / 1 ({cores} cores)", two_one)
