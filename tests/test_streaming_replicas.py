"""Streaming across replicas: a replica hears only the tasks it follows, a stream survives its
replica killed mid-run (the client resumes on another), and a replica stopping ends its
streams cleanly."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import orjson

from gateway.store.connection import RedisTarget
from tests.conftest import API_KEYS, RawRedis, auth, message
from tests.processes import PROCESS_SECONDS, serving, slow_process_test
from tests.sse import collect, events
from tests.streaming_helpers import (
    TEXT,
    echo,
    normal,
    request_on,
    rpc,
    state,
    streamed_text,
    until_chunks,
)
from tests.streaming_helpers import (
    gw as gw,
)
from tests.waiting import until


async def test_a_replica_hears_only_the_tasks_it_follows(
    gw: httpx.AsyncClient, redis_url: str
) -> None:
    """A task's changes reach a replica only while it follows the task (a stream here): a
    send whose run is in the same replica adds no pub/sub traffic, and no replica hears the
    news of every task the others run. Stops (a cancel) reach every replica."""
    # The node the replica subscribes on (in a cluster, PUBLISH counts that node's receivers).
    node = RedisTarget.parse(redis_url).events_client(5.0)

    async def receivers(tid: str) -> int:
        return int(await node.publish(f"gw:ev:{tid}", b"probe|0"))

    sent = await gw.post("/v1/message:send", json={"message": message(TEXT)})
    assert sent.json()["task"]["status"]["state"] == "completed"
    assert await receivers(sent.json()["task"]["id"]) == 0
    path, body = request_on("rest", TEXT, {"echo": {"finalState": "working"}})
    async with gw.stream("POST", path, json=body) as r:
        stream = events(r)
        tid = (await anext(stream)).data["id"]

        async def receiving() -> int:  # 0 until the stream, past its first event, subscribes
            return await receivers(tid)

        assert await until(receiving, what="the stream to follow its task") == 1  # it alone
        assert (await gw.post(f"/v1/tasks/{tid}:cancel")).status_code == 200
        tail = [e async for e in stream if e.comment is None]
    assert state(*normal(tail[-1].data)) == "canceled"

    async def unfollowed() -> bool:
        return await receivers(tid) == 0

    await until(unfollowed, what="the ended stream to stop following its task")
    await node.aclose()


@slow_process_test
async def test_a_stream_survives_its_replica_killed_mid_run(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    """Stream on replica A, which runs the task; A is killed (SIGKILL) mid-run; the client
    resubscribes on replica B with its Last-Event-ID: no event missed, none repeated, and the
    run, resumed by B after the job's lease, finishes."""
    env = {"REDIS_URL": redis_url, "GATEWAY_JOB_LEASE_SECONDS": "1",
           "GATEWAY_API_KEYS": orjson.dumps(API_KEYS).decode()}  # fmt: skip
    _, body = request_on("jsonrpc-0.3", TEXT, echo(8, 8000))
    async with httpx.AsyncClient(timeout=60, headers=auth("alice")) as c:
        with serving(tmp_path, **env) as (a, base_a):
            async with c.stream("POST", f"{base_a}/", json=body) as r:
                seen = await until_chunks(events(r), 3)
                a.send_signal(signal.SIGKILL)
                a.wait(timeout=PROCESS_SECONDS)
        tid = normal(seen[0].data)[1]["id"]
        with serving(tmp_path, **env) as (_, base_b):
            resume = {"Last-Event-ID": seen[-1].id or ""}
            resubscribe = rpc("tasks/resubscribe", {"id": tid})
            async with c.stream("POST", f"{base_b}/", json=resubscribe, headers=resume) as r:
                rest = await collect(r)
            # The whole log, from the first event on, as B serves it.
            resume = {"Last-Event-ID": seen[0].id or ""}
            async with c.stream("GET", f"{base_b}/v1/tasks/{tid}:subscribe", headers=resume) as r:
                log = await collect(r)
            stored = (await c.get(f"{base_b}/v1/tasks/{tid}")).json()
    ids = [e.id for e in seen + rest]
    assert len(ids) == len(set(ids)) and ids[1:] == [e.id for e in log]
    received = [normal(e.data) for e in seen + rest]
    assert state(*received[-1]) == "completed"
    # B ran it again from the start: its first chunk replaced what A had streamed.
    starts = [p for k, p in received if k == "artifact" and not p["append"]]
    assert [p["artifact"]["name"] for p in starts] == ["echo-stream", "echo-stream", "echo"]
    assert streamed_text(received) == TEXT
    assert [a["parts"] for a in stored["artifacts"] if a["name"] == "echo-stream"] == [
        [{"kind": "text", "text": TEXT}]
    ]


@slow_process_test
async def test_a_replica_stopping_ends_its_streams_cleanly(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    """A graceful stop (SIGTERM) ends the replica's open streams properly (the body is
    complete, not cut), so their clients can resubscribe elsewhere with their last id."""
    env = {"REDIS_URL": redis_url, "GATEWAY_SHUTDOWN_GRACE_SECONDS": "1",
           "GATEWAY_API_KEYS": orjson.dumps(API_KEYS).decode()}  # fmt: skip
    path, body = request_on("rest", TEXT, {"echo": {"finalState": "working"}})
    async with httpx.AsyncClient(timeout=60, headers=auth("alice")) as c:
        with serving(tmp_path, **env) as (a, base):
            async with c.stream("POST", f"{base}{path}", json=body) as r:
                stream = events(r)
                first = await anext(stream)
                a.send_signal(signal.SIGTERM)
                rest = [e async for e in stream if e.comment is None]  # no protocol error
            assert a.wait(timeout=PROCESS_SECONDS) == 0
    # Ended by the stop, not by the task (which is still working): no final event.
    assert normal(first.data)[0] == "task" and not any(e.data.get("final") for e in rest)
