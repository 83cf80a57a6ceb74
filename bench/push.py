"""`make bench` push notification figures, against a webhook stand-in on 127.0.0.1.

Webhook drain: sends carrying a push config while the webhook answers 503 (about 1,000
events queued: each task's submitted and completed), then the time from its recovery until
every event is delivered and acknowledged. The deliverer's backoff is capped at 0.5 s here,
so the figure is the delivery rate, not the wait for the next retry slot (with the default
300 s cap, events are retried within 300 s of recovery).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from pathlib import Path

import orjson
from redis import Redis

from bench import loadgen
from bench.__main__ import cpu_seconds, process
from bench.report import REPORT
from gateway.embedded_redis import EmbeddedRedis, free_port
from tests.webhook_receiver import WebhookReceiver

PUSH = "gw:{jobs}:push"
JOBS = "gw:{jobs}"
SENDS = 500


def _body(n: int, url: str) -> bytes:
    message = {"role": "user", "messageId": f"push-{n}", "parts": [{"kind": "text", "text": "x"}]}
    config = {"blocking": False, "pushNotificationConfig": {"url": url, "token": "t"}}
    return orjson.dumps({"message": message, "configuration": config})


async def _drain(port: int, pid: int, redis: Redis, hook: WebhookReceiver) -> None:
    hook.down = True
    counter = itertools.count()
    accepted = 0

    async def sender(lane: int) -> None:
        nonlocal accepted
        for _ in range(lane, SENDS, 16):
            request = loadgen.post("/v1/message:send", _body(next(counter), hook.url))
            status, _ = await loadgen.one(port, request)
            accepted += status == 200

    await asyncio.gather(*(sender(lane) for lane in range(16)))
    deadline = time.perf_counter() + 120
    while int(redis.xlen(JOBS)) > 0:  # every run settled: all its events are queued
        await asyncio.sleep(0.05)
        if time.perf_counter() > deadline:
            raise RuntimeError("the runs did not settle")
    queued = int(redis.xlen(PUSH))
    await asyncio.sleep(1.0)  # the deliverer retries against the outage meanwhile
    hook.down = False
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    while int(redis.xlen(PUSH)) > 0:
        await asyncio.sleep(0.01)
        if time.perf_counter() - started > 120:
            raise RuntimeError("the push outbox did not drain")
    seconds = time.perf_counter() - started
    cpu_ms = (cpu_seconds(pid) - cpu) * 1000
    unique = len(hook.unique())
    print(f"webhook drain after an outage of {queued} events ({accepted} sends accepted)")
    print(
        f"  drained in {seconds:.2f} s from recovery = {queued / seconds:.0f} events/s "
        f"(target >= 500); {unique} distinct event ids received, {len(hook.accepted)} requests "
        f"accepted, {hook.attempts} attempts in all; gateway CPU {cpu_ms / queued:.2f} ms "
        "per event while draining"
    )
    REPORT.target("webhook drain after an outage", queued / seconds, 500, ">=", "events/s")


def push_bench(tmp: Path) -> None:
    server = EmbeddedRedis(tmp / "redis-push")
    url = server.start()
    hook = WebhookReceiver().start()
    port = free_port()
    env = {
        "REDIS_URL": url,
        "GATEWAY_LOG_REQUESTS": "false",
        "GATEWAY_LOG_LEVEL": "ERROR",
        "GATEWAY_EMBEDDER": "none",
        "GATEWAY_OUTBOUND_ALLOWLIST": "127.0.0.1",
        "GATEWAY_PUSH_BACKOFF_FIRST_SECONDS": "0.1",
        "GATEWAY_PUSH_BACKOFF_MAX_SECONDS": "0.5",
    }
    try:
        serve = [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port)]
        with process(serve, env, port) as proc:
            asyncio.run(_drain(port, proc.pid, Redis.from_url(url), hook))
    finally:
        hook.stop()
        server.stop()
