"""A small closed-loop HTTP/1.1 load generator on raw asyncio streams.

Kept lean on purpose: the client shares two cores with the server, so every
microsecond it spends is taken from what it measures.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

RequestFactory = Callable[[int], bytes]
# One request on an open connection: the seconds it is measured to take, None for an error.
Exchange = Callable[[asyncio.StreamReader, asyncio.StreamWriter, bytes], Awaitable[float | None]]


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    # The runs a merged result was made of (``bench.harness.merge``), in order; none for a run.
    parts: list[Result] = field(default_factory=list)

    @property
    def throughput(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def post(path: str, body: bytes, headers: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{headers}\r\n"
    ).encode() + body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes]:
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    body = await reader.readexactly(length) if length else b""
    return status, body


async def timed_exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> float | None:
    """Seconds from the request to its whole response; None unless it is a 200."""
    started = time.perf_counter()
    status, _ = await _exchange(reader, writer, request)
    return time.perf_counter() - started if status == 200 else None


async def one(port: int, request: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await _exchange(reader, writer, request)
    finally:
        writer.close()
        await writer.wait_closed()


async def run(
    port: int,
    make_request: RequestFactory,
    concurrency: int,
    seconds: float,
    counter: itertools.count[int],
    exchange: Exchange = timed_exchange,
) -> Result:
    """``concurrency`` connections, each sending requests one after another for ``seconds``;
    each request is timed by ``exchange`` (by default, to its whole response)."""
    result = Result()
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                elapsed = await exchange(reader, writer, make_request(next(counter)))
                if elapsed is None:
                    result.errors += 1
                else:
                    result.latencies.append(elapsed)
        finally:
            writer.close()
            await writer.wait_closed()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    result.seconds = time.perf_counter() - started
    return result
