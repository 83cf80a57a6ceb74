"""Streaming (`BENCH_ONLY=streaming`): time to the first event of a streaming send against
a blocking send's latency, events per second to one reader, and what 1,000 idle
subscribers cost the gateway (RSS, CPU).

A streaming send's first event is the task as it stands once stored, so its latency should
sit close to a blocking send's (which also waits for the run). Raw asyncio connections, as
in ``loadgen``: the client shares the cores with the server.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import orjson

from bench import loadgen
from bench.harness import ROUNDS, SECONDS, cpu_seconds, in_turn, merge, one_gateway, rss_mb
from bench.report import REPORT

IDLE_SUBSCRIBERS = 1000
IDLE_SECONDS = 20.0  # longer than a keep-alive interval (15 s)


def _stream(n: int, echo: dict[str, object] | None = None) -> bytes:
    message: dict[str, object] = {
        "role": "user",
        "messageId": f"stream-{n}",
        "parts": [{"kind": "text", "text": "Patient stable; continue current plan."}],
    }
    if echo:
        message["metadata"] = {"echo": echo}
    return loadgen.post("/v1/message:stream", orjson.dumps({"message": message}))


async def _read_chunk(reader: asyncio.StreamReader) -> bytes:
    """One chunk of a chunked body (b"" at its end)."""
    size = int((await reader.readuntil(b"\r\n")).strip(), 16)
    data = await reader.readexactly(size + 2)
    return data[:-2]


async def _first_event(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[float, bytes]:
    """Seconds from the request to the first event's bytes; the whole stream is read."""
    started = time.perf_counter()
    writer.write(request)
    await reader.readuntil(b"\r\n\r\n")
    first = await _read_chunk(reader)
    elapsed = time.perf_counter() - started
    body = first
    while chunk := await _read_chunk(reader):  # to the last (empty) chunk
        body += chunk
    return elapsed, body


async def _time_to_first_event(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> float:
    elapsed, _ = await _first_event(reader, writer, request)
    return elapsed


def _blocking(n: int) -> bytes:
    parts = [{"kind": "text", "text": "Patient stable; continue current plan."}]
    message = {"role": "user", "messageId": f"send-{n}", "parts": parts}
    return loadgen.post("/v1/message:send", orjson.dumps({"message": message}))


async def _events_per_second(port: int) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        started = time.perf_counter()
        _, body = await _first_event(reader, writer, _stream(1, {"chunks": 1000}))
        seconds = time.perf_counter() - started
    finally:
        writer.close()
        await writer.wait_closed()
    return body.count(b"\ndata: ") / seconds if seconds else 0.0


async def _idle(port: int, pid: int) -> tuple[float, float]:
    """Extra RSS (MB) and CPU share of IDLE_SUBSCRIBERS subscribers to a working task."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_stream(2, {"finalState": "working"}))
    await reader.readuntil(b"\r\n\r\n")
    first = await _read_chunk(reader)
    task_id = orjson.loads(first.split(b"data: ", 1)[1])["id"]
    rss_before = rss_mb(pid)
    connections = []
    for _ in range(IDLE_SUBSCRIBERS):
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(loadgen.get(f"/v1/tasks/{task_id}:subscribe"))
        connections.append((r, w))
    for r, _ in connections:
        await r.readuntil(b"\r\n\r\n")
        await _read_chunk(r)  # the task: subscribed
    rss_after, cpu_start = rss_mb(pid), cpu_seconds(pid)
    await asyncio.sleep(IDLE_SECONDS)
    cpu_end = cpu_seconds(pid)
    writer.write(loadgen.post(f"/v1/tasks/{task_id}:cancel", b"{}"))
    for _, w in [*connections, (reader, writer)]:
        w.close()
    return rss_after - rss_before, (cpu_end - cpu_start) / IDLE_SECONDS


async def _run(port: int, pid: int) -> None:
    counter = itertools.count(70_000_000)
    for concurrency in (1, 32):
        streamed: list[loadgen.Result] = []
        blocking: list[loadgen.Result] = []
        runs = (
            (streamed, _stream, _time_to_first_event),
            (blocking, _blocking, loadgen.timed_exchange),
        )
        for n in range(ROUNDS):  # interleaved, in turn
            for results, request, exchange in in_turn(runs, n):
                results.append(
                    await loadgen.run(
                        port, request, concurrency, SECONDS, counter, exchange=exchange
                    )
                )
        s, b = merge(streamed), merge(blocking)
        print(f"streaming send, time to first event, c={concurrency}: p50 {s.pct(0.5):.2f} ms, "
              f"p99 {s.pct(0.99):.2f} ms; blocking send p50 {b.pct(0.5):.2f} ms")  # fmt: skip
        REPORT.run(f"streaming, c={concurrency}", "first event", "gateway", s)
        REPORT.run(f"streaming, c={concurrency}", "blocking send", "gateway", b)
        if concurrency == 1:
            gap = s.pct(0.5) - b.pct(0.5)
            REPORT.target("c=1 first event p50 - blocking send p50", gap, 2.0, "<=", "ms")
        REPORT.figure(f"c={concurrency} first event p99 (ms)", s.pct(0.99))
    rate = await _events_per_second(port)
    print(f"events/s to one reader (1,000 chunks): {rate:.0f}")
    REPORT.figure("events/s to one reader", rate)
    extra_mb, cpu = await _idle(port, pid)
    print(
        f"{IDLE_SUBSCRIBERS} idle subscribers: +{extra_mb:.1f} MB RSS, {cpu * 100:.2f}% of a core"
    )
    REPORT.target(f"{IDLE_SUBSCRIBERS} idle subscribers, extra RSS", extra_mb, 100, "<", "MB")
    REPORT.target(f"{IDLE_SUBSCRIBERS} idle subscribers, CPU", cpu * 100, 5, "<", "% core")


def streaming_bench(tmp: Path) -> None:
    # The idle subscribers are all one principal's (open mode): its stream limit raised to
    # hold them, as many users' subscribers would be held under the default.
    env = {"GATEWAY_EMBEDDER": "none", "GATEWAY_STREAMS_PER_PRINCIPAL": str(IDLE_SUBSCRIBERS + 8)}
    with one_gateway(tmp, "redis-streaming", env) as served:
        asyncio.run(_run(served.port, served.pid))
