"""`make bench` section ``embedding``: what background embedding costs a send, and how soon a
message is searchable.

Three gateways as shipped (durable queue), each on a Redis of its own: embedding on
(wordllama, the serving process's indexer), off, and on in a ``gateway worker`` process
(``GATEWAY_SERVE_EMBEDS=false``, an option, not a target). Interleaved and rotated:

1. c=1 blocking send p50 and p99, on against off.
2. c=32 throughput and system CPU per send, on against off: each run lasts until its
   messages are embedded (the backlog counts in its time), and the CPU is read then, once
   every process is idle again: the gateway's, the worker's where there is one, and Redis's.
3. Searchable delay and ``consistency=wait`` search (``bench.searchable``), on the gateway
   with embedding on.
4. The indexer's cost per message in batches of 1, 8, 32 and 128
   (``bench.embedding_batches``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from pathlib import Path

from redis import Redis

from bench import loadgen
from bench.embedding_batches import batch_costs
from bench.harness import (
    ROUNDS,
    SECONDS,
    by_round,
    cpu_seconds,
    gateway,
    in_turn,
    line,
    merge,
    posts,
    ratio,
    send_body,
    timed_rounds,
    wait_for_indexer,
    worker,
)
from bench.report import REPORT
from bench.searchable import searchable
from gateway.embedded_redis import EmbeddedRedis, free_port

ON, OFF, IN_WORKER = "embedding on (wordllama)", "embedding off", "on, in a worker process"


def embedding_section(tmp: Path) -> None:
    servers = [EmbeddedRedis(tmp / f"redis-emb{i}") for i in range(3)]
    urls = [s.start() for s in servers]
    ports = {ON: free_port(), OFF: free_port(), IN_WORKER: free_port()}
    try:
        with contextlib.ExitStack() as stack:
            sides = (
                {"GATEWAY_EMBEDDER": "wordllama"},
                {"GATEWAY_EMBEDDER": "none"},
                {"GATEWAY_EMBEDDER": "wordllama", "GATEWAY_SERVE_EMBEDS": "false"},
            )
            pids: dict[str, list[int]] = {}
            for (name, port), url, env, server in zip(
                ports.items(), urls, sides, servers, strict=True
            ):
                proc = stack.enter_context(gateway(port, {"REDIS_URL": url, **env}))
                assert server.process is not None
                pids[name] = [proc.pid, server.process.pid]
            pids[IN_WORKER].append(stack.enter_context(worker(urls[2], free_port())).pid)
            indexed = {ON: Redis.from_url(urls[0]), IN_WORKER: Redis.from_url(urls[2])}
            asyncio.run(_on_off(ports, pids, indexed))
            asyncio.run(searchable(ports[ON], urls[0]))
    finally:
        for s in servers:
            s.stop()
    batch_costs(tmp)


async def _on_off(
    ports: dict[str, int], pids: dict[str, list[int]], indexed: dict[str, Redis]
) -> None:
    counter = itertools.count(40_000_000)
    merged = await timed_rounds(ports, counter, 150)
    print("blocking send latency, concurrency 1, embedding on vs off (interleaved)")
    for name, r in merged.items():
        print(line(name, r))
    on, off, in_worker = merged[ON], merged[OFF], merged[IN_WORKER]
    p50_on_off, p99_on_off = ratio(on.pct(0.5), off.pct(0.5)), ratio(on.pct(0.99), off.pct(0.99))
    print(f"  ratio on/off: p50 {p50_on_off:.2f}, p99 {p99_on_off:.2f}")
    for name, r in merged.items():
        REPORT.run("message:send, c=1", f"memory: {name}", "gateway", r)
    REPORT.target("c=1 send p50, embedding on/off", p50_on_off, 1.05, "<=")
    REPORT.target("c=1 send p99, embedding on/off", p99_on_off, 1.05, "<=")
    worker_p50, worker_p99 = (
        ratio(in_worker.pct(0.5), off.pct(0.5)),
        ratio(in_worker.pct(0.99), off.pct(0.99)),
    )
    print(f"  in a worker process, p50 / p99 ratio to off: {worker_p50:.2f} / {worker_p99:.2f}")
    REPORT.figure("c=1 send p50, embedding in a worker/off", worker_p50)
    REPORT.figure("c=1 send p99, embedding in a worker/off", worker_p99)
    await _busy(ports, pids, indexed, counter)


async def _busy(
    ports: dict[str, int],
    pids: dict[str, list[int]],
    indexed: dict[str, Redis],
    counter: itertools.count[int],
) -> None:
    """c=32 throughput and system CPU per send (every process of the configuration, Redis
    included), each run lasting until its backlog is embedded."""
    request = posts("/v1/message:send", send_body)
    runs: dict[str, list[loadgen.Result]] = {name: [] for name in ports}
    cpu = dict.fromkeys(ports, 0.0)
    for n in range(ROUNDS):
        for name, port in in_turn(ports.items(), n):
            started = sum(cpu_seconds(pid) for pid in pids[name])
            result = await loadgen.run(port, request, 32, SECONDS, counter)
            if name in indexed:  # embedding off queues nothing
                result.seconds += wait_for_indexer(indexed[name])
            cpu[name] += sum(cpu_seconds(pid) for pid in pids[name]) - started
            runs[name].append(result)
    busy = {name: merge(r) for name, r in runs.items()}
    us = {name: ratio(cpu[name] * 1e6, len(busy[name].latencies)) for name in ports}
    print("blocking send throughput, concurrency 32, embedding on vs off (interleaved)")
    for name, r in busy.items():
        print(f"{line(name, r)}   system CPU {us[name]:6.0f} µs/send")
        REPORT.run("message:send, c=32", f"memory: {name}", "gateway", r)
        REPORT.figure(f"c=32 system CPU per send, {name} (µs)", us[name])
    busy_ratio = ratio(busy[ON].throughput, busy[OFF].throughput)
    cpu_ratio = ratio(us[ON], us[OFF])
    print(
        f"  on/off: throughput {busy_ratio:.2f} ({by_round(busy[ON], busy[OFF])}), system CPU "
        f"per send {cpu_ratio:.2f} (gateway + Redis, read once the backlog is embedded)"
    )
    worker_ratio = ratio(busy[IN_WORKER].throughput, busy[OFF].throughput)
    worker_cpu = ratio(us[IN_WORKER], us[OFF])
    print(
        f"  in a worker process, to off: throughput {worker_ratio:.2f}, system CPU per send "
        f"{worker_cpu:.2f} (gateway + worker + Redis)"
    )
    REPORT.target("c=32 send throughput, embedding on/off", busy_ratio, 0.90, ">=")
    REPORT.target("c=32 system CPU per send, embedding on/off", cpu_ratio, 1.10, "<=")
    REPORT.figure("c=32 send throughput, embedding in a worker/off", worker_ratio)
    REPORT.figure("c=32 system CPU per send, embedding in a worker/off", worker_cpu)
