"""How soon a sent message is searchable, and what ``consistency=wait`` costs a search
(`make bench`, section ``embedding``, on a gateway as shipped).

Searchable delay: blocking echo sends at concurrency 1 and 32, each opening a context; for
a sample of them (every message at c=1, one in eight at c=32) a watcher reads the context's
embedded count (``embd`` in its meta) straight from Redis, every 2 ms in one pipeline for all
the sampled contexts still waiting, and takes the time from the send's acknowledgement to
the first read that finds the message embedded (up to 2 ms late).

Search: one context of 40 embedded messages searched one request at a time, plain and with
``consistency=wait`` interleaved (nothing is pending: the wait's own cost); beside it, a
figure: a search with ``consistency=wait`` sent as soon as a send to its context returns.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

import orjson
from redis.asyncio import Redis

from bench import loadgen
from bench.harness import ROUNDS, SECONDS, merge, ratio, send_body, timed
from bench.report import REPORT
from gateway.principal import Principal
from gateway.store import fields as f
from gateway.store.keys import keys_of

_KEYS = keys_of(Principal("default", "local"))  # open mode's principal
_POLL = 0.002
_SEARCHES = 200
_QUERY = orjson.dumps({"query": "chest pain radiating to the arm", "topK": 5})


class _Watcher:
    """The sampled contexts still waiting for their vector, read together every ``_POLL``."""

    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._waiting: dict[str, float] = {}  # context's meta key -> acknowledged at
        self.delays: list[float] = []
        self.done = False

    def add(self, context_id: str, acknowledged: float) -> None:
        self._waiting[_KEYS.context(context_id).meta] = acknowledged

    async def run(self) -> None:
        while not self.done or self._waiting:
            await asyncio.sleep(_POLL)
            keys = list(self._waiting)
            if not keys:
                continue
            async with self._redis.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hget(key, f.META_EMBEDDED)
                embedded = await pipe.execute()
            now = time.perf_counter()
            for key, count in zip(keys, embedded, strict=True):
                if count is not None and int(count) >= 1:
                    self.delays.append(now - self._waiting.pop(key))


async def _sender(
    port: int, watcher: _Watcher, counter: itertools.count[int], sample: int, until: float
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.perf_counter() < until:
            n = next(counter)
            status, body = await loadgen._exchange(
                reader, writer, loadgen.post("/v1/message:send", send_body(n))
            )
            if status == 200 and n % sample == 0:
                watcher.add(orjson.loads(body)["task"]["contextId"], time.perf_counter())
    finally:
        writer.close()


async def _delays(port: int, redis: Redis, concurrency: int, sample: int) -> list[float]:
    watcher = _Watcher(redis)
    watching = asyncio.create_task(watcher.run())
    counter = itertools.count(50_000_000)
    until = time.perf_counter() + SECONDS * ROUNDS
    await asyncio.gather(
        *(_sender(port, watcher, counter, sample, until) for _ in range(concurrency))
    )
    watcher.done = True
    await asyncio.wait_for(watching, 120)
    return sorted(watcher.delays)


def _ms(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


async def _context(port: int, messages: int) -> str:
    """A context of ``messages`` sends, returned once they are embedded."""
    _, body = await loadgen.one(port, loadgen.post("/v1/message:send", send_body(0)))
    cid: str = orjson.loads(body)["task"]["contextId"]
    for n in range(1, messages):
        await loadgen.one(port, loadgen.post("/v1/message:send", send_body(n, cid)))
    search = loadgen.post(f"/v1/contexts/{cid}:search?consistency=wait", _QUERY)
    status, _ = await loadgen.one(port, search)
    assert status == 200
    return cid


def _searches(cid: str, consistency: str) -> Callable[[], bytes]:
    query = f"?consistency={consistency}" if consistency else ""
    request = loadgen.post(f"/v1/contexts/{cid}:search{query}", _QUERY)
    return lambda: request


async def _after_send(port: int, cid: str, count: int) -> loadgen.Result:
    """A send to ``cid``, then at once a search with ``consistency=wait`` (timed)."""
    result = loadgen.Result()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    search = _searches(cid, "wait")()
    try:
        for n in range(count):
            send = loadgen.post("/v1/message:send", send_body(60_000_000 + n, cid))
            await loadgen._exchange(reader, writer, send)
            elapsed = await loadgen.timed_exchange(reader, writer, search)
            if elapsed is None:
                result.errors += 1
            else:
                result.latencies.append(elapsed)
    finally:
        writer.close()
    return result


async def searchable(port: int, redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    try:
        for concurrency, sample in ((1, 1), (32, 8)):
            delays = await _delays(port, redis, concurrency, sample)
            p50, p99 = _ms(delays, 0.5), _ms(delays, 0.99)
            print(
                f"searchable delay after the send's answer, c={concurrency}: p50 {p50:.1f} ms, "
                f"p99 {p99:.1f} ms, max {_ms(delays, 1.0):.1f} ms ({len(delays)} messages)"
            )
            REPORT.figure(f"c={concurrency} searchable delay p50 (ms)", p50)
            if concurrency == 32:
                REPORT.target("c=32 searchable delay p99", p99, 250, "<=", "ms")
            else:
                REPORT.figure(f"c={concurrency} searchable delay p99 (ms)", p99)
        cid = await _context(port, 40)
        runs: dict[str, list[loadgen.Result]] = {"": [], "wait": []}
        for n in range(ROUNDS * 2):
            for consistency in ("", "wait") if n % 2 == 0 else ("wait", ""):
                runs[consistency].append(
                    await timed(port, _searches(cid, consistency), _SEARCHES // 2)
                )
        plain, waiting = merge(runs[""]), merge(runs["wait"])
        after = await _after_send(port, cid, _SEARCHES)
    finally:
        await redis.aclose()
    wait_plain = ratio(waiting.pct(0.5), plain.pct(0.5))
    print(
        f"context search, c=1, 40 embedded messages: plain p50 {plain.pct(0.5):.2f} ms, "
        f"consistency=wait p50 {waiting.pct(0.5):.2f} ms ({wait_plain:.2f}×), "
        f"p99 {plain.pct(0.99):.2f} / {waiting.pct(0.99):.2f} ms; consistency=wait just "
        f"after a send: p50 {after.pct(0.5):.1f} ms, p99 {after.pct(0.99):.1f} ms"
    )
    REPORT.target("search p50, consistency=wait/plain", wait_plain, 2.0, "<=")
    REPORT.figure("search p50, consistency=wait just after a send (ms)", after.pct(0.5))
    REPORT.figure("search p99, consistency=wait just after a send (ms)", after.pct(0.99))
