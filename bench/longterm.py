"""`make bench` long-term memory figures, against a Cortadel stand-in on 127.0.0.1.

1. Blocking send latency at concurrency 1 with recall on (the stand-in answering in
   50 ms) vs off, interleaved in the same run, and the share of it spent in recall.
2. Outbox drain: 1,000 turns sent while Cortadel is down, then the time from its
   recovery until every turn is delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from pathlib import Path

import httpx
from redis import Redis

from bench import loadgen
from bench.harness import ROUNDS, gateway, line, send_body, timed_rounds
from bench.report import REPORT
from gateway.embedded_redis import EmbeddedRedis, free_port
from gateway.longterm.render import cortadel_user_id
from tests.cortadel_server import CortadelServer

OUTBOX = "gw:{jobs}:ltm"
STANDIN_MS = 50
TURNS = 1000


def _env(url: str, cortadel: CortadelServer | None, store: bool = True) -> dict[str, str]:
    env = {"REDIS_URL": url, "GATEWAY_LOG_LEVEL": "ERROR", "GATEWAY_EMBEDDER": "none"}
    if cortadel is not None:
        env |= {
            "GATEWAY_CORTADEL_URL": cortadel.url,
            "GATEWAY_CORTADEL_API_KEY": "cortadel-key",
            "GATEWAY_CORTADEL_BACKOFF_MAX_SECONDS": "0.5",
            "GATEWAY_CORTADEL_RECALL_TIMEOUT_MS": "1500",
            "GATEWAY_CORTADEL_STORE_TURNS": "true" if store else "false",
            # the seeded memories have no subject nor session: recall them user-wide
            "GATEWAY_CORTADEL_SUBJECTLESS_RECALL": "user",
        }
    return env


async def _ready(port: int) -> None:
    for _ in range(200):
        _, body = await loadgen.one(port, loadgen.get("/readyz"))
        if b'"cortadel":"ok"' in body or b'"cortadel"' not in body:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError("the Cortadel key probe did not pass")


async def _standin_latency(url: str, count: int) -> float:
    """The stand-in's own answer time to a search, as a plain HTTP client sees it (ms)."""
    body = {"query": "chest pain", "user_id": "bench", "top_k": 5, "mode": "hybrid"}
    headers = {"Authorization": "Bearer cortadel-key"}
    samples = []
    async with httpx.AsyncClient() as client:
        for _ in range(count):
            started = time.perf_counter()
            await client.post(f"{url}/api/v1/memories/search", json=body, headers=headers)
            samples.append(time.perf_counter() - started)
    return sorted(samples)[len(samples) // 2] * 1000


async def _latency(ports: dict[str, int], cortadel_url: str) -> None:
    await asyncio.gather(*(_ready(p) for p in ports.values()))
    merged = await timed_rounds(ports, itertools.count(60_000_000), 40)
    standin = await _standin_latency(cortadel_url, 40 * ROUNDS)
    print(f"blocking send latency, concurrency 1, recall on (stand-in {STANDIN_MS} ms) vs off")
    for name, r in merged.items():
        print(line(name, r))
    on, off = merged["recall on"], merged["recall off"]
    added = on.pct(0.5) - off.pct(0.5)
    recall_ms = await _metric_mean_ms(ports["recall on"], "gateway_ltm_recall_seconds")
    print(
        f"  stand-in search p50 seen by a plain client: {standin:.1f} ms (configured delay "
        f"{STANDIN_MS} ms)\n"
        f"  p50 added by recall: {added:.1f} ms = stand-in + {added - standin:.1f} ms "
        f"(target: stand-in + 5 ms)\n"
        f"  mean recall {recall_ms:.1f} ms = {recall_ms / on.pct(0.5):.0%} of the send p50\n"
        f"  with turns also stored (outbox in the same process, same stand-in): stand-in + "
        f"{merged['recall + store on'].pct(0.5) - off.pct(0.5) - standin:.1f} ms"
    )
    for name, r in merged.items():
        REPORT.run("message:send, c=1", f"long-term: {name}", "gateway", r)
    REPORT.figure("stand-in search p50 seen by a plain client (ms)", standin)
    REPORT.figure("mean recall / send p50", recall_ms / on.pct(0.5))
    REPORT.figure(
        "recall + store on, p50 added beyond the stand-in (ms)",
        merged["recall + store on"].pct(0.5) - off.pct(0.5) - standin,
    )
    REPORT.target("recall p50 added beyond the stand-in", added - standin, 5, "<=", "ms")


async def _metric_mean_ms(port: int, name: str) -> float:
    _, body = await loadgen.one(port, loadgen.get("/metrics"))
    total = count = 0.0
    for raw in body.decode().splitlines():
        if raw.startswith(f"{name}_sum "):
            total = float(raw.split()[1])
        elif raw.startswith(f"{name}_count "):
            count = float(raw.split()[1])
    return total / count * 1000 if count else float("nan")


async def _drain(port: int, redis: Redis, cortadel: CortadelServer) -> None:
    await _ready(port)
    cortadel.down = True
    counter = itertools.count(70_000_000)
    accepted = 0

    async def sender(lane: int) -> None:
        nonlocal accepted
        for _ in range(lane, TURNS, 16):
            request = loadgen.post("/v1/message:send", send_body(next(counter)))
            status, _ = await loadgen.one(port, request)
            accepted += status == 200

    await asyncio.gather(*(sender(lane) for lane in range(16)))
    queued = int(redis.xlen(OUTBOX))
    await asyncio.sleep(1.0)  # the outbox retries against the outage meanwhile
    cortadel.down = False
    started = time.perf_counter()
    while int(redis.xlen(OUTBOX)) > 0:
        await asyncio.sleep(0.01)
        if time.perf_counter() - started > 120:
            raise RuntimeError("the outbox did not drain")
    seconds = time.perf_counter() - started
    stored = sum(1 for m in cortadel.memories.values() if (m.uuid or "").startswith("bench-7"))
    print(f"outbox drain after an outage of {TURNS} turns ({accepted} sends completed)")
    print(
        f"  {queued} turns queued; drained in {seconds:.2f} s from recovery = "
        f"{queued / seconds:.0f} turns/s (target >= 200); {stored} user messages stored once"
    )
    REPORT.target("outbox drain after an outage", queued / seconds, 200, ">=", "turns/s")


def longterm_bench(tmp: Path) -> None:
    servers = [EmbeddedRedis(tmp / f"redis-ltm{i}") for i in range(4)]
    urls = [s.start() for s in servers]
    cortadel = CortadelServer().start()
    cortadel.delay = STANDIN_MS / 1000
    for n in range(5):
        cortadel.seed(cortadel_user_id("default", "local"), f"chest pain history item {n}")
    ports = {"recall on": free_port(), "recall + store on": free_port(), "recall off": free_port()}
    try:
        with contextlib.ExitStack() as stack:
            on, off = ports["recall on"], ports["recall off"]
            # Turns are not stored here: the latency is recall's alone (the store is measured
            # by the drain below, and runs off the request path).
            env_on = _env(urls[0], cortadel, store=False)
            stack.enter_context(gateway(on, env_on))
            both = ports["recall + store on"]
            stack.enter_context(gateway(both, _env(urls[3], cortadel)))
            stack.enter_context(gateway(off, _env(urls[1], None)))
            asyncio.run(_latency(ports, cortadel.url))
        cortadel.delay = 0.0
        port = free_port()
        with gateway(port, _env(urls[2], cortadel)):
            asyncio.run(_drain(port, Redis.from_url(urls[2]), cortadel))
    finally:
        cortadel.stop()
        for s in servers:
            s.stop()
