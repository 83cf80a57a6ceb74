"""Many streams at once, through real `gateway serve` processes: a process's open streams
share one reader of the task logs and hold no Redis connection, new streams over the
limits are refused while open ones go on, and a slow reader's buffer is bounded."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson

from tests.conftest import API_KEYS, CLUSTER, RawRedis, auth, message
from tests.processes import serving, slow_process_test
from tests.sse import Sse, collect, events
from tests.waiting import until

PLUGINS = "tests.agents:Partial,tests.agents:StoreFlaky,tests.agents:Gated"
READERS = 300


async def connections(redis: RawRedis) -> int:
    """Client connections Redis holds now (on every node of a cluster)."""
    if not CLUSTER:
        return int((await redis.info("clients"))["connected_clients"])
    total = 0
    for node in redis.get_nodes():
        total += int((await redis.info("clients", target_nodes=node))["connected_clients"])
    return total


async def gated_task(c: httpx.AsyncClient, gate: Path, chunks: int, size: int) -> str:
    """A task of the gated agent, under way: it streams its artifact once ``gate`` exists."""
    meta = {"gate": str(gate), "chunks": chunks, "size": size}
    body = {"message": message("go", metadata=meta), "configuration": {"blocking": False}}
    r = await c.post("/agents/gated/v1/message:send", json=body)
    assert r.status_code == 200, r.text
    return str(r.json()["task"]["id"])


def last_state(seen: list[Sse]) -> str | None:
    status = seen[-1].data.get("status") if seen else None
    return status["state"] if status else None


def artifact_text(seen: list[Sse]) -> str:
    text = ""
    for e in seen:
        if e.data.get("kind") == "artifact-update":
            piece = "".join(p["text"] for p in e.data["artifact"]["parts"])
            text = text + piece if e.data.get("append") else piece
    return text


@slow_process_test
async def test_hundreds_of_streams_of_one_task_hold_no_redis_connection(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    """Every one of a few hundred streams of one task gets every event and the final one;
    the process's Redis connections stay few while they are open, and come back to what
    they were once they end."""
    env = {"REDIS_URL": redis_url, "GATEWAY_AGENT_PLUGINS": PLUGINS,
           "GATEWAY_STREAMS_PER_PRINCIPAL": str(READERS)}  # fmt: skip
    gate = tmp_path / "gate"
    limits = httpx.Limits(max_connections=READERS + 10, max_keepalive_connections=0)
    with serving(tmp_path, **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as c:
            tid = await gated_task(c, gate, chunks=5, size=1000)
            before = await connections(redis)
            opened: list[Sse] = []

            async def read() -> list[Sse]:
                async with c.stream("GET", f"/v1/tasks/{tid}:subscribe") as r:
                    assert r.status_code == 200
                    stream = events(r)
                    first = await anext(stream)
                    opened.append(first)
                    return [first, *[e async for e in stream if e.comment is None]]

            readers = [asyncio.create_task(read()) for _ in range(READERS)]

            def all_open() -> bool:
                for reader in readers:
                    if reader.done():
                        reader.result()  # a reader that failed fails the test now
                return len(opened) == READERS

            await until(all_open, what="every stream to open", timeout=120)
            during = await connections(redis)
            gate.touch()
            seen = await asyncio.wait_for(asyncio.gather(*readers), 120)
    for got in seen:
        assert last_state(got) == "completed" and got[-1].data["final"] is True
        assert artifact_text(got) == "".join(chr(ord("a") + n) * 1000 for n in range(5))
    # A few connections at most for all of them (no pooled one each)...
    assert during - before <= 24, (before, during)

    # ...and none left once they are gone (the process too, here).
    async def back() -> bool:
        return await connections(redis) <= before

    await until(back, what="Redis connections to come back to what they were")


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


@slow_process_test
async def test_streams_over_the_limits_are_refused_and_open_ones_go_on(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    env = {"REDIS_URL": redis_url, "GATEWAY_AGENT_PLUGINS": PLUGINS,
           "GATEWAY_API_KEYS": orjson.dumps(API_KEYS).decode(),
           "GATEWAY_STREAMS_PER_PRINCIPAL": "2", "GATEWAY_STREAMS_PER_PROCESS": "3"}  # fmt: skip
    gate = tmp_path / "gate"
    with serving(tmp_path, **env) as (_, base):
        async with (
            httpx.AsyncClient(base_url=base, timeout=60, headers=auth("alice")) as alice,
            httpx.AsyncClient(base_url=base, timeout=60, headers=auth("bob")) as bob,
        ):
            tid = await gated_task(alice, gate, chunks=3, size=10)
            bob_tid = await gated_task(bob, gate, chunks=3, size=10)
            async with (
                alice.stream("GET", f"/v1/tasks/{tid}:subscribe") as a1,
                alice.stream("POST", "/", json=rpc("tasks/resubscribe", {"id": tid})) as a2,
            ):
                a1_events, a2_events = events(a1), events(a2)
                await anext(a1_events), await anext(a2_events)
                # Alice has her two: a third is refused on every binding, nothing stored.
                tasks_before = (await alice.get("/v1/tasks")).json()
                r = await alice.get(f"/v1/tasks/{tid}:subscribe")
                assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
                assert r.json()["error"] == "RateLimitedError"
                assert r.json()["data"]["limit"] == "streams"
                r = await alice.post("/", json=rpc("message/stream", {"message": message("x")}))
                assert r.status_code == 429 and int(r.headers["retry-after"]) > 0
                assert r.json()["id"] == 7 and r.json()["error"]["code"] == -32027
                v1 = {
                    "message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "x"}]}
                }
                r = await alice.post("/a2a/message:stream", json=v1)
                assert r.status_code == 429
                assert r.json()["error"]["details"][0]["reason"] == "RATE_LIMITED"
                assert (await alice.get("/v1/tasks")).json() == tasks_before
                # Bob's first is the process's third; his second is one too many for it.
                async with bob.stream("GET", f"/a2a/v1/tasks/{bob_tid}:subscribe") as b1:
                    b1_events = events(b1)
                    await anext(b1_events)
                    r = await bob.post("/", json=rpc("SubscribeToTask", {"id": bob_tid}))
                    assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
                    assert r.json()["error"]["code"] == -32603
                    r = await bob.get(f"/v1/tasks/{bob_tid}:subscribe")
                    assert r.status_code == 503 and int(r.headers["retry-after"]) > 0
                    # The open streams were not touched: each gets its task to its end.
                    gate.touch()
                    rests = [
                        [e async for e in s if e.comment is None]
                        for s in (a1_events, a2_events, b1_events)
                    ]
            for rest in rests[:2]:
                assert last_state(rest) == "completed" or (
                    rest[-1].data["result"]["status"]["state"] == "completed"
                )
            assert rests[2][-1].data["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
            # Ended streams give their place back...
            async with alice.stream("GET", f"/v1/tasks/{tid}:subscribe") as again:
                assert again.status_code == 200
                assert [last_state(await collect(again))] == ["completed"]
            # ...and so do streams their clients leave under way.
            waiting = await gated_task(alice, tmp_path / "never", chunks=1, size=10)
            for _ in range(2):
                async with alice.stream("GET", f"/v1/tasks/{waiting}:subscribe") as left:
                    await anext(events(left))

            async def admitted() -> bool:
                async with alice.stream("GET", f"/v1/tasks/{waiting}:subscribe") as r:
                    return r.status_code == 200

            await until(admitted, what="the streams left to give their places back")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class StalledReader:
    """A client that opens a stream, reads its first event, then reads nothing (a small
    receive buffer, so the server soon has to hold back what it writes)."""

    def __init__(self, base: str, path: str) -> None:
        parts = urlsplit(base)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        self.sock.settimeout(30)
        self.sock.connect((parts.hostname or "", parts.port or 80))
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
        self.got = b""
        while b"\n\n" not in self.got.partition(b"\r\n\r\n")[2]:
            piece = self.sock.recv(4096)
            assert piece and self.got[:12] in b"HTTP/1.1 200", self.got[:300]
            self.got += piece

    def rest(self) -> bytes:
        """Everything until the server ends the stream."""
        while not self.got.endswith(b"0\r\n\r\n"):
            piece = self.sock.recv(1 << 20)
            if not piece:
                break
            self.got += piece
        self.sock.close()
        return self.got


def frames(raw: bytes) -> list[Sse]:
    """The events of a chunked SSE response read raw."""
    _, _, body = raw.partition(b"\r\n\r\n")
    data, rest = b"", body
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        n = int(size, 16)
        data, rest = data + rest[:n], rest[n + 2 :]
    out = []
    for block in data.split(b"\n\n"):
        fields = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
        if b"data" in fields:
            out.append(Sse(fields.get(b"id", b"").decode(), orjson.loads(fields[b"data"])))
    return out


@slow_process_test
async def test_slow_readers_of_big_events_hold_a_bounded_buffer(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    """Sixteen readers that stop reading while a task streams 16 MiB each hold at most
    their buffer (256 KiB here: one event) and the event being written: the process's memory grows by
    little more than when one reader alone follows such a task. What a stalled reader did
    not take stays in Redis: once it reads again it gets every event, to the last."""
    chunks, size, stalled = 32, 512 * 1024, 16
    # glibc's mmap threshold fixed: a freed 512 KiB event goes back to the system, so the
    # RSS measures the buffers held, not where the allocator's moving threshold left them
    # (18-86 MiB run to run without it, 14-17 with it).
    env = {"REDIS_URL": redis_url, "GATEWAY_AGENT_PLUGINS": PLUGINS,
           "GATEWAY_STREAM_BUFFER_BYTES": str(256 * 1024),
           "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}  # fmt: skip
    with serving(tmp_path, **env) as (proc, base):
        async with httpx.AsyncClient(base_url=base, timeout=120) as c:

            async def follow() -> list[Sse]:
                async with c.stream("GET", f"/v1/tasks/{tid}:subscribe") as fast:
                    return await collect(fast)

            # What streaming such a task costs the process, with one reader...
            tid = await gated_task(c, tmp_path / "warm", chunks=chunks, size=size)
            (tmp_path / "warm").touch()
            assert last_state(await follow()) == "completed"
            before = rss_bytes(proc.pid)
            # ...and with sixteen more that read nothing after the task's first event.
            tid = await gated_task(c, tmp_path / "gate", chunks=chunks, size=size)
            path = f"/v1/tasks/{tid}:subscribe"
            readers = [StalledReader(base, path) for _ in range(stalled)]
            try:
                (tmp_path / "gate").touch()
                seen = await follow()
                grown = rss_bytes(proc.pid) - before
                got = frames(await asyncio.to_thread(readers[0].rest))
            finally:
                for reader in readers:
                    reader.sock.close()
    assert last_state(seen) == "completed"
    # A stalled reader costs an event in its buffer and the one it writes (with the
    # allocator's slack: 4 MiB at most), not the 16 MiB its client has not taken.
    assert grown < 64 * 1024 * 1024, grown // (1024 * 1024)
    assert last_state(got) == "completed"
    assert artifact_text(got) == "".join(chr(ord("a") + n % 26) * size for n in range(chunks))
