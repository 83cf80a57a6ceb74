"""The `make bench` harness every section shares: the processes it starts (a gateway, a
worker, a gateway on an embedded Redis of its own), the request it sends (``send_body``),
the loads it runs in interleaved rounds (``send_rounds``, ``timed_rounds``, ``timed``),
how it merges and compares their results (``merge``, ``ratio``, ``by_round``, ``line``),
what it reads off a process (``cpu_seconds``, ``rss_mb``, ``histogram``), and the wait
for the indexer to catch up (``wait_for_indexer``).

Knobs read here: ``BENCH_ROUNDS`` (``ROUNDS``) and ``BENCH_SECONDS`` (``SECONDS``).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import NamedTuple, TypeVar

import orjson
from redis import Redis

from bench import loadgen
from gateway.embedded_redis import EmbeddedRedis, free_port
from gateway.store.keys import EMBEDS

T = TypeVar("T")
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "3"))
# Every gateway the benchmark starts seals content at rest, as by default (see docs/security.md).
BENCH_KEYRING = '{"k1": "YmVuY2gta2V5LWJlbmNoLWtleS1iZW5jaC1rZXktMDE="}'
os.environ.setdefault("GATEWAY_ENCRYPTION_KEYS", BENCH_KEYRING)
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


def wait_for_indexer(redis: Redis, deadline_s: float = 120.0) -> float:
    """Seconds until the indexer has embedded every message queued on ``redis`` (it deletes
    each job from the stream once done)."""
    started = time.monotonic()
    while time.monotonic() < started + deadline_s:
        if redis.xlen(EMBEDS) == 0:
            return time.monotonic() - started
        time.sleep(0.01)
    raise SystemExit("the indexer did not catch up within its deadline")
