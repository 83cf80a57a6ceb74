"""`make bench` push notification figures, against a webhook stand-in on 127.0.0.1.

Delivery lag, in steady state: sends carrying a push config, paced at ``RATE`` a second
(two events each, well under what the deliverer drains) while the webhook answers at once;
the lag of an event is from the change that queued it to its arrival at the webhook. It is
taken on each task's ``completed`` event, whose body (0.3: the Task) carries the status
timestamp the gateway wrote with that change, read against the receiver's clock (the same
host's). p50 and p99 over the run.

Webhook drain, ``ROUNDS`` times: sends carrying a push config while the webhook answers 503
(about 1,000 events queued: each task's submitted and completed), then the time from its
recovery until every event is delivered and acknowledged, with pass or miss against the
≥ 500 events/s target each round. The deliverer's backoff is capped at 0.5 s here, so the
figure is the delivery rate, not the wait for the next retry slot (with the default 300 s
cap, events are retried within 300 s of recovery).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from redis import Redis

from bench import loadgen
from bench.harness import cpu_seconds, one_gateway
from bench.report import REPORT
from tests.webhook_receiver import WebhookReceiver

PUSH = "gw:{jobs}:push"
JOBS = "gw:{jobs}"
SENDS = 500  # per drain round: ~1,000 events
ROUNDS = 3
TARGET = 500  # events/s
RATE = 25  # steady-state sends/s (50 events/s)
STEADY_SENDS = 300


def _body(n: int, url: str) -> bytes:
    message = {"role": "user", "messageId": f"push-{n}", "parts": [{"kind": "text", "text": "x"}]}
    config = {"blocking": False, "pushNotificationConfig": {"url": url, "token": "t"}}
    return orjson.dumps({"message": message, "configuration": config})


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _until(done: Any, what: str, seconds: float = 120) -> None:
    deadline = time.perf_counter() + seconds
    while not done():
        await asyncio.sleep(0.01)
        if time.perf_counter() > deadline:
            raise RuntimeError(what)


async def _steady(port: int, redis: Redis, hook: WebhookReceiver, counter: Any) -> None:
    hook.accepted.clear()
    started = time.perf_counter()

    async def paced(i: int) -> None:
        await asyncio.sleep(max(0.0, started + i / RATE - time.perf_counter()))
        await loadgen.one(port, loadgen.post("/v1/message:send", _body(next(counter), hook.url)))

    await asyncio.gather(*(paced(i) for i in range(STEADY_SENDS)))
    await _until(lambda: int(redis.xlen(JOBS)) == 0, "the runs to settle")
    await _until(lambda: int(redis.xlen(PUSH)) == 0, "the steady-state events to arrive")
    last: dict[str, Any] = {}  # per task, its last event: the completed one
    for delivery in hook.unique().values():
        task, number = delivery.event_id.rsplit(".", 1)
        if int(number) > last.get(task, (0, None))[0]:
            last[task] = (int(number), delivery)
    lags = [
        (d.at - datetime.fromisoformat(d.json()["status"]["timestamp"]).timestamp()) * 1000
        for _, d in last.values()
        if d.json()["status"]["state"] == "completed"
    ]
    p50, p99 = _pct(lags, 0.5), _pct(lags, 0.99)
    print(
        f"webhook delivery lag, steady state ({RATE} sends/s = {2 * RATE} events/s, "
        f"{len(lags)} completed events): p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )
    REPORT.figure("webhook delivery lag p50 (ms)", p50)
    REPORT.figure("webhook delivery lag p99 (ms)", p99)


async def _drain(port: int, pid: int, redis: Redis, hook: WebhookReceiver, counter: Any) -> float:
    """One outage and recovery: the drain rate (events/s)."""
    hook.down = True
    hook.accepted.clear()
    attempts = hook.attempts
    accepted = 0

    async def sender(lane: int) -> None:
        nonlocal accepted
        for _ in range(lane, SENDS, 16):
            request = loadgen.post("/v1/message:send", _body(next(counter), hook.url))
            status, _ = await loadgen.one(port, request)
            accepted += status == 200

    await asyncio.gather(*(sender(lane) for lane in range(16)))
    # every run settled: all its events are queued
    await _until(lambda: int(redis.xlen(JOBS)) == 0, "the runs to settle")
    queued = int(redis.xlen(PUSH))
    await asyncio.sleep(1.0)  # the deliverer retries against the outage meanwhile
    hook.down = False
    cpu = cpu_seconds(pid)
    started = time.perf_counter()
    await _until(lambda: int(redis.xlen(PUSH)) == 0, "the push outbox to drain")
    seconds = time.perf_counter() - started
    cpu_ms = (cpu_seconds(pid) - cpu) * 1000
    rate = queued / seconds
    print(
        f"  outage of {queued} events ({accepted} sends accepted): drained in {seconds:.2f} s "
        f"from recovery = {rate:.0f} events/s ({'pass' if rate >= TARGET else 'miss'}: "
        f">= {TARGET}); {len(hook.unique())} distinct event ids, {len(hook.accepted)} requests "
        f"accepted, {hook.attempts - attempts} attempts; gateway CPU {cpu_ms / queued:.2f} ms "
        "per event while draining"
    )
    REPORT.figure("webhook drain CPU per event (ms)", cpu_ms / queued)
    return rate


async def _bench(port: int, pid: int, redis: Redis, hook: WebhookReceiver) -> None:
    counter = itertools.count()
    await _steady(port, redis, hook, counter)
    print(f"webhook drain after an outage, {ROUNDS} rounds")
    rates = [await _drain(port, pid, redis, hook, counter) for _ in range(ROUNDS)]
    met = sum(rate >= TARGET for rate in rates)
    print(f"  target >= {TARGET} events/s met in {met} of {ROUNDS} rounds")
    for n, rate in enumerate(rates, 1):
        REPORT.target(f"webhook drain after an outage, round {n}", rate, TARGET, ">=", "events/s")


def push_bench(tmp: Path) -> None:
    env = {
        "GATEWAY_LOG_LEVEL": "ERROR",
        "GATEWAY_EMBEDDER": "none",
        "GATEWAY_PUSH_ALLOWLIST": "127.0.0.1",
        "GATEWAY_PUSH_BACKOFF_FIRST_SECONDS": "0.1",
        "GATEWAY_PUSH_BACKOFF_MAX_SECONDS": "0.5",
    }
    hook = WebhookReceiver().start()
    try:
        with one_gateway(tmp, "redis-push", env) as served:
            redis = Redis.from_url(served.redis_url)
            asyncio.run(_bench(served.port, served.pid, redis, hook))
    finally:
        hook.stop()
