"""Replica-acknowledged writes, on vs off in one run (``GATEWAY_REDIS_MIN_REPLICAS_ACK``):
blocking sends at c=1 and c=32 to two gateways, each on its own primary with one replica,
interleaved rounds; the gateways' CPU per send beside."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import time
from pathlib import Path

from redis import Redis

from bench.harness import (
    BENCH_KEYRING,
    ROUNDS,
    by_round,
    cpu_seconds,
    gateway,
    line,
    ratio,
    send_rounds,
)
from bench.report import REPORT
from gateway.embedded_redis import EmbeddedRedis, free_port

SIDES = ("replica acks on", "replica acks off")


def _pair(root: Path) -> tuple[EmbeddedRedis, EmbeddedRedis]:
    primary = EmbeddedRedis(root / "primary", password=False)
    replica = EmbeddedRedis(
        root / "replica",
        password=False,
        extra_args=("--replicaof", "127.0.0.1", str(primary.port)),
    )
    return primary, replica


def replicas_bench(tmp: Path) -> None:
    pairs = [_pair(tmp / f"redis-ack{i}") for i in range(2)]
    ports = {name: free_port() for name in SIDES}
    base = {"GATEWAY_EMBEDDER": "none", "GATEWAY_ENCRYPTION_KEYS": BENCH_KEYRING}
    try:
        for primary, replica in pairs:
            primary.start()
            replica.start()
            _synced(replica)
        with contextlib.ExitStack() as stack:
            procs: dict[str, subprocess.Popen[bytes]] = {}
            for (name, port), (primary, _) in zip(ports.items(), pairs, strict=True):
                acks = "1" if name.endswith("on") else "0"
                env = {**base, "REDIS_URL": primary.url, "GATEWAY_REDIS_MIN_REPLICAS_ACK": acks}
                procs[name] = stack.enter_context(gateway(port, env))
            asyncio.run(_on_off(ports, {name: p.pid for name, p in procs.items()}))
    finally:
        for primary, replica in pairs:
            replica.stop()
            primary.stop()


def _synced(replica: EmbeddedRedis) -> None:
    """Wait until the replica follows its primary (the gateway's first writes wait for it)."""
    deadline = time.monotonic() + 60
    with Redis(port=replica.port) as client:
        while client.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise SystemExit("a replica did not sync with its primary in 60 s")
            time.sleep(0.05)


async def _on_off(ports: dict[str, int], pids: dict[str, int]) -> None:
    counter = itertools.count(70_000_000)
    for concurrency in (1, 32):
        started = {name: cpu_seconds(pid) for name, pid in pids.items()}
        results = await send_rounds(ports, concurrency, counter, max(ROUNDS, 2))
        print(f"blocking send, concurrency {concurrency}, replica acks on (1) vs off (interleaved)")
        for name, r in results.items():
            used = cpu_seconds(pids[name]) - started[name]
            per_send = used / len(r.latencies) * 1000 if r.latencies else float("nan")
            print(f"{line(name, r)}   gateway CPU {per_send:.2f} ms/send")
            REPORT.run(f"message:send, c={concurrency}", name, "gateway", r)
            REPORT.figure(f"gateway CPU ms per send, c={concurrency}, {name}", round(per_send, 3))
        on, off = results[SIDES[0]], results[SIDES[1]]
        print(
            f"  throughput ratio on/off: {ratio(on.throughput, off.throughput):.2f} "
            f"({by_round(on, off)}); p50 {on.pct(0.5):.2f} vs {off.pct(0.5):.2f} ms"
        )
        REPORT.figure(
            f"c={concurrency} send throughput, replica acks on/off",
            round(ratio(on.throughput, off.throughput), 3),
        )
