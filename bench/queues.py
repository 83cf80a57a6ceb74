"""`make bench` queues (`BENCH_ONLY=queues`): blocking sends at c=32 to three gateways,
each on a Redis of its own, interleaved: the in-process queue, the durable queue in one
process, and one HTTP process with two worker processes; then the wait from enqueue to
start on idle workers, read off the workers' ``gateway_job_wait_seconds`` histogram.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path

from bench import loadgen
from bench.harness import (
    ROUNDS,
    gateway,
    histogram,
    line,
    ratio,
    send_body,
    send_rounds,
    timed,
    worker,
)
from bench.report import REPORT
from gateway.embedded_redis import EmbeddedRedis, free_port


def quantile(buckets: dict[float, float], q: float) -> float:
    """The upper bound of the bucket holding the q-quantile (ms)."""
    total = max(buckets.values(), default=0)
    for bound in sorted(buckets):
        if total and buckets[bound] >= q * total:
            return bound * 1000
    return float("nan")


async def durable_vs_memory(ports: dict[str, int], worker_metrics: list[int]) -> None:
    counter = itertools.count(30_000_000)
    merged = await send_rounds(ports, 32, counter)
    print(
        f"blocking echo message:send, concurrency 32, queue variants ({ROUNDS} interleaved rounds)"
    )
    for name, r in merged.items():
        print(line(name, r))
    base = merged["in-process queue (memory)"].throughput
    for name, r in merged.items():
        print(f"  {name}: {ratio(r.throughput, base):.2f} of the in-process queue's throughput")
        REPORT.run("message:send, c=32", f"queues: {name}", "gateway", r)
        if name != "in-process queue (memory)":
            REPORT.figure(f"{name} / in-process queue throughput", ratio(r.throughput, base))
    durable = ratio(merged["durable queue, one process"].throughput, base)
    REPORT.target("durable queue / in-process queue, c=32", durable, 0.70, ">=")
    before = [histogram(p, "gateway_job_wait_seconds") for p in worker_metrics]
    split = ports["1 HTTP + 2 worker processes"]
    await timed(split, lambda: loadgen.post("/v1/message:send", send_body(next(counter))), 300)
    after = [histogram(p, "gateway_job_wait_seconds") for p in worker_metrics]
    delta: dict[float, float] = {}
    for b, a in zip(before, after, strict=True):
        for bound, count in a.items():
            delta[bound] = delta.get(bound, 0) + count - b.get(bound, 0)
    print(
        "enqueue -> start, idle workers (300 sequential sends, 1 HTTP + 2 workers): "
        f"p50 <= {quantile(delta, 0.5):.1f} ms, p99 <= {quantile(delta, 0.99):.1f} ms "
        "(histogram bucket bounds)"
    )
    REPORT.target("enqueue -> start p99 (bucket bound)", quantile(delta, 0.99), 20, "<", "ms")


def queues_bench(tmp: Path) -> None:
    servers = [EmbeddedRedis(tmp / f"redis-q{i}") for i in range(3)]
    urls = [server.start() for server in servers]
    ports = {
        name: free_port()
        for name in (
            "in-process queue (memory)",
            "durable queue, one process",
            "1 HTTP + 2 worker processes",
        )
    }
    metrics_ports = [free_port(), free_port()]
    names = list(ports)
    try:
        with contextlib.ExitStack() as stack:
            in_process_queue = {"REDIS_URL": urls[0], "GATEWAY_QUEUE": "memory"}
            stack.enter_context(gateway(ports[names[0]], in_process_queue))
            stack.enter_context(gateway(ports[names[1]], {"REDIS_URL": urls[1]}))
            stack.enter_context(gateway(ports[names[2]], {"REDIS_URL": urls[2]}, "--no-workers"))
            for mport in metrics_ports:
                stack.enter_context(worker(urls[2], mport))
            asyncio.run(durable_vs_memory(ports, metrics_ports))
    finally:
        for server in servers:
            server.stop()
