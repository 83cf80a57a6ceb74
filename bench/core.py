"""`make bench` core (`BENCH_ONLY=core`): blocking echo sends at c=1 and c=32 to the
gateway beside the floor (Starlette + one Redis pipeline, ``bench.floor``), the ceiling
(Starlette answering a constant, ``bench.ceiling``) and the a2a-sdk reference
(``bench.reference``), interleaved round by round, with each server's CPU and its Redis's
CPU per request, GC pauses and the gateway's peak RSS; then append and page latency at a
small vs a 10,000-task context, and the Redis bytes a context of 1,000 turns holds against
its JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from redis import Redis

from bench import loadgen
from bench.harness import (
    QUIET,
    ROUNDS,
    SECONDS,
    by_round,
    cpu_seconds,
    gateway,
    histogram,
    in_turn,
    line,
    merge,
    posts,
    process,
    ratio,
    rss_mb,
    send_body,
    timed,
    wait_for_indexer,
)
from bench.report import REPORT
from gateway.embedded_redis import EmbeddedRedis, free_port
from gateway.store.keys import EVENT_STREAM


def jsonrpc_send_body(n: int) -> bytes:
    """The same message as ``send_body``, as a JSON-RPC ``message/send`` (the reference)."""
    message = orjson.loads(send_body(n))["message"]
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": n, "method": "message/send", "params": {"message": message}}
    )


def gc_pauses(port: int) -> tuple[float, float]:
    """Garbage collector pauses so far (all generations): how many, and how many > 10 ms."""
    total = over = 0.0
    for generation in "012":
        buckets = histogram(port, "gateway_gc_pause_seconds", f'generation="{generation}"')
        count = buckets.get(float("inf"), 0.0)
        total += count
        over += count - buckets.get(0.01, 0.0)
    return total, over


# The servers of the core comparison, their request and the role the chart gives them.
CORE_SERVERS: dict[str, tuple[str, str, Callable[[int], bytes]]] = {
    "ceiling": ("ceiling (Starlette, no Redis)", "ceiling", lambda n: send_body(n)),
    "floor": ("floor (Starlette + 1 pipeline)", "floor", lambda n: send_body(n)),
    "reference": ("a2a-sdk 0.3 JSON-RPC, in-memory", "reference", jsonrpc_send_body),
    "gateway": ("gateway (embedding off)", "gateway", lambda n: send_body(n)),
    "defaults": ("gateway (defaults)", "gateway", lambda n: send_body(n)),
}
PATHS = {
    "ceiling": "/ceiling",
    "floor": "/floor",
    "reference": "/",
    "gateway": "/v1/message:send",
    "defaults": "/v1/message:send",
}


async def send_vs_floor(
    ports: dict[str, int],
    pids: dict[str, int],
    redis_pids: dict[str, int],
    settle: Callable[[str], float],
) -> float:
    """The core comparison; ``redis_pids``: the Redis each server writes to, whose CPU
    during that server's runs is its Redis cost per request; ``settle`` as in
    ``send_rounds`` (a run's CPU is read once its background work is done)."""
    counter = itertools.count()
    peak = 0.0
    for concurrency in (1, 32):
        res: dict[str, list[loadgen.Result]] = {name: [] for name in CORE_SERVERS}
        cpu = dict.fromkeys(CORE_SERVERS, 0.0)
        redis_cpu = dict.fromkeys(CORE_SERVERS, 0.0)
        pauses_before = gc_pauses(ports["defaults"])
        for n in range(ROUNDS):
            for name, (_, _, body) in in_turn(CORE_SERVERS.items(), n):
                sampler = asyncio.create_task(sample_rss(pids[name])) if name == "gateway" else None
                started = cpu_seconds(pids[name])
                redis_started = cpu_seconds(redis_pids[name])
                res[name].append(
                    await loadgen.run(
                        ports[name],
                        posts(PATHS[name], body),
                        concurrency,
                        SECONDS,
                        counter,
                    )
                )
                res[name][-1].seconds += settle(name)
                cpu[name] += cpu_seconds(pids[name]) - started
                redis_cpu[name] += cpu_seconds(redis_pids[name]) - redis_started
                if sampler is not None:
                    sampler.cancel()
                    peak = max(peak, await sampler_result(sampler))
        pauses = [b - a for a, b in zip(pauses_before, gc_pauses(ports["defaults"]), strict=True)]
        merged = {name: merge(r) for name, r in res.items()}
        print(
            f"blocking echo message:send, concurrency {concurrency} ({ROUNDS} interleaved rounds)"
        )
        group = f"message:send, c={concurrency}"
        us, system = {}, {}
        for name, (label, role, _) in CORE_SERVERS.items():
            r = merged[name]
            us[name] = ratio(cpu[name] * 1e6, len(r.latencies))
            redis_us = ratio(redis_cpu[name] * 1e6, len(r.latencies))
            system[name] = us[name] + redis_us  # the server's and its Redis's, backlog done
            print(line(label, r) + f"   CPU {us[name]:6.0f} µs/req, Redis {redis_us:4.0f}")
            REPORT.run(group, label, role, r)
            REPORT.figure(f"c={concurrency} server CPU per request, {label} (µs)", us[name])
            if name != "ceiling":
                REPORT.figure(f"c={concurrency} Redis CPU per request, {label} (µs)", redis_us)
        ceiling, floor, reference = merged["ceiling"], merged["floor"], merged["reference"]
        gw, defaults = merged["gateway"], merged["defaults"]
        throughput_ratio = ratio(defaults.throughput, floor.throughput)
        p50_difference = defaults.pct(0.5) - floor.pct(0.5)
        print(
            f"  gateway (defaults): throughput/floor {throughput_ratio:.2f} "
            f"({by_round(defaults, floor)}), "
            f"/reference {ratio(defaults.throughput, reference.throughput):.2f} "
            f"({by_round(defaults, reference)}); "
            f"p50 difference to the floor: {p50_difference:+.2f} ms; "
            f"floor/ceiling: {ratio(floor.throughput, ceiling.throughput):.2f}; "
            f"GC pauses {pauses[0]:.0f}, {pauses[1]:.0f} over 10 ms"
        )
        REPORT.figure(
            f"c={concurrency} throughput gateway/ceiling", ratio(gw.throughput, ceiling.throughput)
        )
        REPORT.figure(f"c={concurrency} GC pauses, gateway (defaults)", pauses[0])
        if concurrency == 32:
            REPORT.target("c=32 send server CPU, gateway", us["defaults"], 600, "<=", "µs")
            REPORT.target(
                "c=32 system CPU per send (server + Redis), gateway/floor",
                ratio(system["defaults"], system["floor"]),
                2.0,
                "<=",
            )
            REPORT.target("c=32 send throughput, gateway/floor", throughput_ratio, 0.50, ">=")
            REPORT.target(
                "c=32 send throughput, gateway/a2a-sdk reference",
                ratio(defaults.throughput, reference.throughput),
                2.0,
                ">=",
            )
            REPORT.target(
                "c=32 send p99, gateway/floor",
                ratio(defaults.pct(0.99), floor.pct(0.99)),
                2.0,
                "<=",
            )
            REPORT.target("c=32 GC pauses over 10 ms, gateway", pauses[1], 0, "<=")
            REPORT.figure(
                "c=32 send throughput, gateway (embedding off)/floor",
                ratio(gw.throughput, floor.throughput),
            )
        else:
            REPORT.target("c=1 send p50, gateway - floor", p50_difference, 0.6, "<=", "ms")
    return peak


_peaks: dict[int, float] = {}


async def sample_rss(pid: int) -> None:
    _peaks[pid] = 0.0
    while True:
        _peaks[pid] = max(_peaks[pid], rss_mb(pid))
        await asyncio.sleep(0.2)


async def sampler_result(task: asyncio.Task[None]) -> float:
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return max(_peaks.values())


async def new_context(port: int, counter: itertools.count[int], messages: int) -> str:
    status, body = await loadgen.one(
        port, loadgen.post("/v1/message:send", send_body(next(counter)))
    )
    assert status == 200, body
    cid: str = orjson.loads(body)["task"]["contextId"]
    remaining = messages // 2 - 1
    while remaining > 0:
        batch = min(32, remaining)
        requests = [
            loadgen.post("/v1/message:send", send_body(next(counter), cid)) for _ in range(batch)
        ]
        await asyncio.gather(*(loadgen.one(port, r) for r in requests))
        remaining -= batch
    return cid


async def scaling(port: int) -> None:
    counter = itertools.count(10_000_000)
    print("building a context of 20,000 messages (10,000 tasks) ...", flush=True)
    large = await new_context(port, counter, 20_000)
    small = [await new_context(port, counter, 10) for _ in range(ROUNDS * 2)]
    appends: dict[str, list[loadgen.Result]] = {"small": [], "large": []}

    def append_to(cid: str) -> Callable[[], bytes]:
        return lambda: loadgen.post("/v1/message:send", send_body(next(counter), cid))

    def page_of(cid: str) -> Callable[[], bytes]:
        return lambda: loadgen.get(f"/v1/contexts/{cid}?limit=10")

    pages: dict[str, list[loadgen.Result]] = {"small": [], "large": []}
    for i in range(ROUNDS * 2):
        appends["small"].append(await timed(port, append_to(small[i]), 50))
        appends["large"].append(await timed(port, append_to(large), 50))
        pages["small"].append(await timed(port, page_of(small[i]), 100))
        pages["large"].append(
            await timed(
                port, lambda: loadgen.get(f"/v1/contexts/{large}?limit=10&offset=5000"), 100
            )
        )
    for name, table in (
        ("append (blocking send)", appends),
        ("GET context page (limit 10)", pages),
    ):
        s, big = merge(table["small"]), merge(table["large"])
        print(f"{name}, concurrency 1, interleaved")
        print(line("10-message context", s))
        print(line("10,000+-message context", big))
        large_small = ratio(big.pct(0.5), s.pct(0.5))
        print(f"  p50 ratio large/small: {large_small:.2f}")
        short = name.split(" (")[0]
        REPORT.run("context size, c=1", f"{short}, 10 messages", "gateway", s)
        REPORT.run("context size, c=1", f"{short}, 10,000+ messages", "gateway", big)
        REPORT.target(f"{short} p50, large/small context", large_small, 1.15, "<=")


def wait_for_aof_rewrite(redis: Redis) -> None:
    """An AOF rewrite holds a buffer of every write: let it end before measuring memory."""
    deadline = time.monotonic() + 60
    while int(redis.info("persistence")["aof_rewrite_in_progress"]) and time.monotonic() < deadline:
        time.sleep(0.1)


# A user's keys: ``gw:{<user tag>}...`` (store/keys.py).
_USER_KEY = re.compile(r"gw:\{[0-9a-f]{24}\}")


async def memory(port: int, redis: Redis) -> None:
    """Bytes Redis holds for a context of 1,000 echo turns, against their JSON."""
    redis.flushall()
    wait_for_aof_rewrite(redis)
    redis.memory_purge()
    before = int(redis.info("memory")["used_memory"])
    cid = await new_context(port, itertools.count(20_000_000), 2_000)
    after = int(redis.info("memory")["used_memory"])
    # Every key the sends left, by what it is: the context's own (the target), the tasks'
    # event logs (each expires EVENTS_GRACE_MS after its task settles), the audit trail
    # (kept GATEWAY_AUDIT_MAX_AGE_SECONDS, whatever happens to the context), and the rest.
    classes = dict.fromkeys(("context", "event logs", "audit trail", "other"), 0)
    for key in redis.scan_iter(count=1000):
        name = key.decode()
        size = int(redis.memory_usage(key, samples=0) or 0)
        if name.startswith("gw:{au:"):
            classes["audit trail"] += size
        elif EVENT_STREAM in name:
            classes["event logs"] += size
        elif _USER_KEY.match(name):  # the user's: the context's keys and their indexes
            classes["context"] += size
        else:
            classes["other"] += size
    keys = classes["context"]
    _, body = await loadgen.one(port, loadgen.get(f"/v1/contexts/{cid}?limit=1000"))
    items = orjson.loads(body)["items"]
    messages = [m for t in items for m in t["history"]]
    per_message_json = sum(len(orjson.dumps(m)) for m in messages) / len(messages)
    everything = sum(len(orjson.dumps(t)) for t in items)
    print(
        f"Redis memory for one context of {len(items)} tasks / {len(messages)} messages "
        f"(each task: user message, agent reply, artifact, status)"
    )
    print(
        f"  MEMORY USAGE of its keys: {keys / len(messages):.0f} B/message, "
        f"{keys / everything:.2f}x the JSON of everything stored "
        f"(message JSON alone: {per_message_json:.0f} B)"
    )
    for name, size in classes.items():
        if name != "context":
            print(f"    and {name}: {size / len(messages):.0f} B/message")
            REPORT.figure(f"Redis bytes per message, {name} (MEMORY USAGE)", size / len(messages))
    print(
        f"  used_memory delta:        {(after - before) / len(messages):.0f} B/message, "
        f"{(after - before) / everything:.2f}x (includes AOF and client buffers)"
    )
    REPORT.figure("Redis bytes per message (MEMORY USAGE)", keys / len(messages))
    REPORT.target("Redis bytes per message / JSON size", keys / everything, 2.0, "<=", "×")


def core_bench(tmp: Path) -> None:
    server, defaults_redis = EmbeddedRedis(tmp / "redis"), EmbeddedRedis(tmp / "redis-defaults")
    url, defaults_url = server.start(), defaults_redis.start()
    ports = {name: free_port() for name in CORE_SERVERS}
    # The core figures measure the A2A path; context memory's cost is measured on its own
    # (embedding on vs off) in the embedding section. "defaults" is the gateway as shipped
    # (durable queue, wordllama embedder on), on a Redis of its own; each of its runs lasts
    # until its messages are embedded.
    env = {**QUIET, "REDIS_URL": url, "GATEWAY_EMBEDDER": "none"}
    try:
        with contextlib.ExitStack() as stack:
            procs = {
                "gateway": stack.enter_context(gateway(ports["gateway"], env)),
                "defaults": stack.enter_context(
                    gateway(ports["defaults"], {"REDIS_URL": defaults_url})
                ),
            }
            for name, module in (
                ("floor", "bench.floor"),
                ("ceiling", "bench.ceiling"),
                ("reference", "bench.reference"),
            ):
                procs[name] = stack.enter_context(
                    process(
                        [sys.executable, "-m", module],
                        {**env, "PORT": str(ports[name])},
                        ports[name],
                    )
                )
            pids = {name: proc.pid for name, proc in procs.items()}
            assert server.process is not None and defaults_redis.process is not None
            redis_pids = dict.fromkeys(CORE_SERVERS, server.process.pid)
            redis_pids["defaults"] = defaults_redis.process.pid
            indexed = Redis.from_url(defaults_url)

            def settle(name: str) -> float:
                return wait_for_indexer(indexed) if name == "defaults" else 0.0

            peak = asyncio.run(send_vs_floor(ports, pids, redis_pids, settle))
            print(f"gateway peak RSS under load: {peak:.0f} MB")
            REPORT.target("gateway peak RSS, c=1 and c=32", peak, 250, "<", "MB")
            asyncio.run(scaling(ports["gateway"]))
            asyncio.run(memory(ports["gateway"], Redis.from_url(url)))
    finally:
        server.stop()
        defaults_redis.stop()
