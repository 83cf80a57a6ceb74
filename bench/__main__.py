"""`make bench`: the gateway against a floor and a ceiling measured in the same run, interleaved.

Prints throughput and latency of blocking echo sends at concurrency 1 and 32 next
to a bare Starlette + one-Redis-pipeline endpoint (the floor) and a bare Starlette
endpoint answering a constant JSON (the ceiling), append and page latency at small vs
large contexts, Redis bytes per stored message against its JSON size, the gateway's
peak RSS under load, the queue variants, context memory, long-term memory, and the cost
of authentication modes, the audit trail and rate limits (``auth``), and streaming
(``streaming``: time to first event, events/s, idle subscribers).

Every section records its figures into ``bench.report.REPORT``; the end prints each
target with its measured value and pass/miss, the total duration, and writes
``report.json`` and ``report.png`` to ``BENCH_OUT`` (default ``.data/bench``).
Knobs: ``BENCH_ROUNDS``, ``BENCH_SECONDS``, ``BENCH_ONLY`` (comma-separated sections),
``BENCH_OUT``, ``BENCH_STRICT=1`` (exit 1 when a target is missed).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import orjson
from redis import Redis

from bench import loadgen
from bench.report import REPORT, write
from gateway.embedded_redis import EmbeddedRedis, free_port
from gateway.store.keys import EMBEDS, EVENT_STREAM

T = TypeVar("T")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
SECTIONS = (
    "core",
    "bindings",
    "queues",
    "memory",
    "longterm",
    "scale",
    "auth",
    "encryption",
    "streaming",
    "push",
    "replicas",
)
# Every gateway the benchmark starts seals content at rest, as by default (see docs/security.md).
BENCH_KEYRING = '{"k1": "YmVuY2gta2V5LWJlbmNoLWtleS1iZW5jaC1rZXktMDE="}'
os.environ.setdefault("GATEWAY_ENCRYPTION_KEYS", BENCH_KEYRING)
OUT = Path(os.environ.get("BENCH_OUT") or Path(__file__).resolve().parent.parent / ".data/bench")
TEXT = "Patient reports intermittent chest pain radiating to the left arm; " * 4


def send_body(n: int, context_id: str | None = None) -> bytes:
    message: dict[str, object] = {
        "role": "user",
        "messageId": f"bench-{n}",
        "parts": [{"kind": "text", "text": TEXT}, {"kind": "data", "data": {"hr": 72, "n": n}}],
    }
    if context_id:
        message["contextId"] = context_id
    return orjson.dumps({"message": message})


@contextmanager
def process(
    args: list[str], env: dict[str, str], port: int, cwd: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """``args`` started in ``cwd`` (this one by default; ``python -m`` imports from there
    first), with ``env`` on top of this process's environment; entered once it answers."""
    proc = subprocess.Popen(args, env={**os.environ, **env}, stdout=subprocess.DEVNULL, cwd=cwd)
    try:
        # A gateway loading its embedding model on a busy machine may take a while to answer.
        deadline = time.monotonic() + 60
        while True:
            try:
                asyncio.run(loadgen.one(port, loadgen.get("/healthz")))
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    failed = f"{' '.join(args[:4])}: not answering on port {port}"
                    raise SystemExit(failed) from None
                time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)


QUIET = {"GATEWAY_LOG_REQUESTS": "false", "GATEWAY_LOG_LEVEL": "WARNING"}


def interpreter(tree: Path | None) -> str:
    """The Python that serves checkout ``tree``: its own venv's when it has one, else this
    one."""
    own = tree / ".venv" / "bin" / "python" if tree is not None else None
    return str(own) if own is not None and own.exists() else sys.executable


def gateway(
    port: int, env: dict[str, str], *args: str, cwd: Path | None = None
) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """``gateway serve --port PORT [args]``, quiet (no request log, warnings only) unless
    ``env`` says otherwise, with ``env`` on top; entered once it answers. ``cwd``: the
    checkout whose ``gateway`` package it serves (``python -m`` imports from its working
    directory before anything on ``PYTHONPATH``), on that checkout's interpreter
    (``interpreter``)."""
    serve = [interpreter(cwd), "-m", "gateway.cli", "serve", "--port", str(port), *args]
    return process(serve, {**QUIET, **env}, port, cwd)


def worker(redis_url: str, metrics_port: int) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """``gateway worker`` on ``redis_url``, quiet as ``gateway``; entered once its metrics
    port (its only HTTP) answers."""
    args = [sys.executable, "-m", "gateway.cli", "worker"]
    env = {**QUIET, "REDIS_URL": redis_url, "GATEWAY_METRICS_PORT": str(metrics_port)}
    return process(args, env, metrics_port)


class Served(NamedTuple):
    """A gateway the benchmark started: its port, its process id and its Redis's URL."""

    port: int
    pid: int
    redis_url: str


@contextmanager
def one_gateway(
    tmp: Path, redis_name: str, env: dict[str, str], cwd: Path | None = None
) -> Iterator[Served]:
    """A gateway (``env`` on top of the ``gateway`` defaults; served from ``cwd`` as in
    ``gateway``) on an embedded Redis of its own, kept under ``tmp/redis_name``; both are
    stopped on leaving."""
    server = EmbeddedRedis(tmp / redis_name)
    url = server.start()
    port = free_port()
    try:
        with gateway(port, {"REDIS_URL": url, **env}, cwd=cwd) as proc:
            yield Served(port, proc.pid, url)
    finally:
        server.stop()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def merge(results: list[loadgen.Result]) -> loadgen.Result:
    out = loadgen.Result(parts=list(results))
    for r in results:
        out.latencies += r.latencies
        out.errors += r.errors
        out.seconds += r.seconds
    return out


def in_turn(items: Iterable[T], round_: int) -> list[T]:
    """Round ``round_``'s order of ``items``: rotated by one each round, so that no
    configuration always runs first in its round (just after the previous round's last
    run and whatever work that left) or always in the same place."""
    order = list(items)
    shift = round_ % len(order) if order else 0
    return order[shift:] + order[:shift]


def ratio(a: float, b: float) -> float:
    """a / b, NaN when b is zero or NaN (a run that measured nothing)."""
    return a / b if b and not math.isnan(b) else float("nan")


def by_round(a: loadgen.Result, b: loadgen.Result) -> str:
    """The range of ``a``'s throughput over ``b``'s in the rounds they were merged from, to
    print beside their merged ratio: how far one round's ratio strays on this host."""
    ratios = [ratio(x.throughput, y.throughput) for x, y in zip(a.parts, b.parts, strict=True)]
    return f"rounds {min(ratios):.2f}–{max(ratios):.2f}" if ratios else "one round"


def line(name: str, r: loadgen.Result) -> str:
    return (
        f"  {name:<30} {r.throughput:9.0f} req/s   p50 {r.pct(0.5):7.2f} ms   "
        f"p99 {r.pct(0.99):7.2f} ms   errors {r.errors}"
    )


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process has used so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def posts(path: str, body: Callable[[int], bytes], headers: str = "") -> Callable[[int], bytes]:
    """A load's n-th request: ``body(n)`` POSTed to ``path``."""
    return lambda n: loadgen.post(path, body(n), headers)


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
        us = {}
        for name, (label, role, _) in CORE_SERVERS.items():
            r = merged[name]
            us[name] = ratio(cpu[name] * 1e6, len(r.latencies))
            redis_us = ratio(redis_cpu[name] * 1e6, len(r.latencies))
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


async def send_rounds(
    ports: dict[str, int],
    concurrency: int,
    counter: itertools.count[int],
    rounds: int = ROUNDS,
    *,
    settle: Callable[[str], float] | None = None,
) -> dict[str, loadgen.Result]:
    """Blocking echo sends at ``concurrency`` for SECONDS to each server in turn, ``rounds``
    times (interleaved, the order rotated each round: ``in_turn``), merged per server.
    ``settle(name)``, if given, waits after each run until the background work the
    run left is done, and returns the seconds it waited: they count in the run's time (its
    throughput is what the server sustains, that work included), and that work takes no CPU
    from the next server's run."""
    request = posts("/v1/message:send", send_body)
    res: dict[str, list[loadgen.Result]] = {name: [] for name in ports}
    for n in range(rounds):
        for name, port in in_turn(ports.items(), n):
            result = await loadgen.run(port, request, concurrency, SECONDS, counter)
            if settle is not None:
                result.seconds += settle(name)
            res[name].append(result)
    return {name: merge(r) for name, r in res.items()}


async def timed_rounds(
    ports: dict[str, int], counter: itertools.count[int], count: int
) -> dict[str, loadgen.Result]:
    """Blocking echo sends one at a time, ``count`` to each server in turn, ROUNDS * 2 times
    (interleaved, in turn), merged per server."""

    def request() -> bytes:
        return loadgen.post("/v1/message:send", send_body(next(counter)))

    res: dict[str, list[loadgen.Result]] = {name: [] for name in ports}
    for n in range(ROUNDS * 2):
        for name, port in in_turn(ports.items(), n):
            res[name].append(await timed(port, request, count))
    return {name: merge(r) for name, r in res.items()}


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


async def timed(port: int, requests: Callable[[], bytes], count: int) -> loadgen.Result:
    result = loadgen.Result()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        status, _ = await loadgen._exchange(reader, writer, requests())
        if status == 200:
            result.latencies.append(time.perf_counter() - t0)
        else:
            result.errors += 1
    result.seconds = time.perf_counter() - started
    writer.close()
    return result


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


def histogram(port: int, name: str, labels: str = "") -> dict[float, float]:
    """Cumulative bucket counts of a Prometheus histogram served on ``port`` (of its series
    whose labels include ``labels``, e.g. ``generation="2"``)."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[float, float] = {}
    for row in text.splitlines():
        if row.startswith(f"{name}_bucket{{") and labels in row:
            bound = row.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if bound == "+Inf" else float(bound)] = float(row.rsplit(" ", 1)[1])
    return out


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


ON, OFF, IN_WORKER = "embedding on (wordllama)", "embedding off", "on, in a worker process"


def embedding_on_off(tmp: Path) -> None:
    """Blocking send latency with background embedding on vs off, same run, interleaved;
    beside them (not a target: not the default), a server that leaves embedding to a
    ``gateway worker`` process (``GATEWAY_SERVE_EMBEDS=false``)."""
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
            for port, url, env in zip(ports.values(), urls, sides, strict=True):
                stack.enter_context(gateway(port, {"REDIS_URL": url, **env}))
            stack.enter_context(worker(urls[2], free_port()))
            indexed = {ON: Redis.from_url(urls[0]), IN_WORKER: Redis.from_url(urls[2])}
            asyncio.run(_on_off(ports, indexed))
    finally:
        for s in servers:
            s.stop()


def wait_for_indexer(redis: Redis, deadline_s: float = 120.0) -> float:
    """Seconds until the indexer has embedded every message queued on ``redis`` (it deletes
    each job from the stream once done)."""
    started = time.monotonic()
    while time.monotonic() < started + deadline_s:
        if redis.xlen(EMBEDS) == 0:
            return time.monotonic() - started
        time.sleep(0.01)
    raise SystemExit("the indexer did not catch up within its deadline")


async def _on_off(ports: dict[str, int], indexed: dict[str, Redis]) -> None:
    counter = itertools.count(40_000_000)
    merged = await timed_rounds(ports, counter, 150)
    print("blocking send latency, concurrency 1, embedding on vs off (interleaved)")
    for name, r in merged.items():
        print(line(name, r))
    on, off, in_worker = merged[ON], merged[OFF], merged[IN_WORKER]
    on_off = ratio(on.pct(0.5), off.pct(0.5))
    print(f"  p50 ratio on/off: {on_off:.2f}")
    for name, r in merged.items():
        REPORT.run("message:send, c=1", f"memory: {name}", "gateway", r)
    REPORT.target("c=1 send p50, embedding on/off", on_off, 1.10, "<=")
    p99_on_off = ratio(on.pct(0.99), off.pct(0.99))
    print(f"  p99 ratio on/off: {p99_on_off:.2f}")
    REPORT.target("c=1 send p99, embedding on/off", p99_on_off, 1.5, "<=")
    worker_p50, worker_p99 = (
        ratio(in_worker.pct(0.5), off.pct(0.5)),
        ratio(in_worker.pct(0.99), off.pct(0.99)),
    )
    print(f"  in a worker process, p50 / p99 ratio to off: {worker_p50:.2f} / {worker_p99:.2f}")
    REPORT.figure("c=1 send p50, embedding in a worker/off", worker_p50)
    REPORT.figure("c=1 send p99, embedding in a worker/off", worker_p99)

    def settle(name: str) -> float:  # embedding off queues nothing
        return wait_for_indexer(indexed[name]) if name in indexed else 0.0

    busy = await send_rounds(ports, 32, counter, settle=settle)
    print("blocking send throughput, concurrency 32, embedding on vs off (interleaved)")
    for name, r in busy.items():
        print(line(name, r))
    busy_ratio = ratio(busy[ON].throughput, busy[OFF].throughput)
    print(
        f"  throughput ratio on/off: {busy_ratio:.2f} ({by_round(busy[ON], busy[OFF])}; "
        "embedding shares the process's CPU; "
        "a run with embedding on lasts until its messages are embedded)"
    )
    worker_ratio = ratio(busy[IN_WORKER].throughput, busy[OFF].throughput)
    print(
        f"  in a worker process, throughput ratio to off: {worker_ratio:.2f} (the worker "
        "embeds on the other core, beside Redis and the load generator)"
    )
    for name, r in busy.items():
        REPORT.run("message:send, c=32", f"memory: {name}", "gateway", r)
    REPORT.target("c=32 send throughput, embedding on/off", busy_ratio, 0.90, ">=")
    REPORT.figure("c=32 send throughput, embedding in a worker/off", worker_ratio)


def core_bench(tmp: Path) -> None:
    server, defaults_redis = EmbeddedRedis(tmp / "redis"), EmbeddedRedis(tmp / "redis-defaults")
    url, defaults_url = server.start(), defaults_redis.start()
    ports = {name: free_port() for name in CORE_SERVERS}
    # The core figures measure the A2A path; context memory's cost is measured on its own
    # (embedding on vs off) in the memory section. "defaults" is the gateway as shipped
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


def bindings_section(tmp: Path) -> None:
    from bench.bindings import bindings_bench

    bindings_bench(tmp)


def memory_section(tmp: Path) -> None:
    from bench.memory import memory_bench

    memory_bench(tmp)
    embedding_on_off(tmp)


def encryption_section(tmp: Path) -> None:
    from bench.encryption import encryption_bench

    encryption_bench(tmp)


def longterm_section(tmp: Path) -> None:
    from bench.longterm import longterm_bench

    longterm_bench(tmp)


def auth_section(tmp: Path) -> None:
    from bench.auth import auth_bench

    auth_bench(tmp)


def streaming_section(tmp: Path) -> None:
    from bench.streaming import streaming_bench

    streaming_bench(tmp)


def push_section(tmp: Path) -> None:
    from bench.push import push_bench

    push_bench(tmp)


def replicas_section(tmp: Path) -> None:
    from bench.replicas import replicas_bench

    replicas_bench(tmp)


def selected() -> list[str]:
    """The sections BENCH_ONLY names (comma-separated), in their order; all when unset."""
    only = {name.strip() for name in os.environ.get("BENCH_ONLY", "").split(",") if name.strip()}
    if unknown := only - set(SECTIONS):
        raise SystemExit(
            f"BENCH_ONLY: unknown section {', '.join(sorted(unknown))} "
            f"(sections: {', '.join(SECTIONS)})"
        )
    return [name for name in SECTIONS if not only or name in only]


def settings(sections: list[str], strict: bool) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parent,
        check=False,
    ).stdout.strip()
    return {
        "rounds": ROUNDS,
        "seconds": SECONDS,
        "only": ",".join(sections) if len(sections) < len(SECTIONS) else "",
        "strict": strict,
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit or None,
    }


def main() -> None:
    runners: dict[str, Callable[[Path], None]] = {
        "core": core_bench,
        "bindings": bindings_section,
        "queues": queues_bench,
        "memory": memory_section,
        "longterm": longterm_section,
        "scale": scale_bench,
        "auth": auth_section,
        "encryption": encryption_section,
        "streaming": streaming_section,
        "push": push_section,
        "replicas": replicas_section,
    }
    sections = selected()
    strict = os.environ.get("BENCH_STRICT") == "1"
    started = time.monotonic()
    REPORT.started = datetime.now().astimezone().isoformat(timespec="seconds")
    REPORT.settings = settings(sections, strict)
    with tempfile.TemporaryDirectory() as tmp:
        for name in sections:
            section_started = time.monotonic()
            runners[name](Path(tmp))
            REPORT.sections[name] = round(time.monotonic() - section_started, 1)
    REPORT.duration_seconds = round(time.monotonic() - started, 1)
    json_path, png_path = write(REPORT, OUT)
    misses = REPORT.misses
    print(f"\ntargets: {len(REPORT.targets) - len(misses)} met, {len(misses)} missed")
    print(REPORT.table())
    minutes, seconds = divmod(REPORT.duration_seconds, 60)
    print(f"total duration: {minutes:.0f} min {seconds:.0f} s ({', '.join(sections)})")
    print(f"report: {json_path}\nchart:  {png_path}")
    if misses and strict:
        sys.exit(1)
    if misses:
        print("a missed target does not fail `make bench`; BENCH_STRICT=1 makes it exit 1")


if __name__ == "__main__":
    main()
