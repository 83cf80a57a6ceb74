"""Streaming: a send's task events as server-sent events on every binding, resubscription
with Last-Event-ID, keep-alives, slow readers, isolation. Served over real HTTP (uvicorn
in this process): streams are read while they are under way."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.store.connection import RedisTarget
from tests.conftest import API_KEYS, RawRedis, auth, message
from tests.processes import PROCESS_SECONDS, serving, slow_process_test
from tests.sse import Sse, collect, events, served_gateway
from tests.waiting import until

TEXT = "Patient stable; continue current plan and review in the morning."


def echo(chunks: int, delay_ms: int, **more: Any) -> dict[str, Any]:
    return {"echo": {"chunks": chunks, "delayMs": delay_ms, **more}}


@pytest.fixture
async def gw(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    keys = orjson.dumps(API_KEYS).decode()
    async with (
        served_gateway(redis_url, api_keys=keys, sse_keepalive_seconds=0.3) as base,
        httpx.AsyncClient(base_url=base, timeout=30, headers=auth("alice")) as c,
    ):
        yield c


def rpc(method: str, params: dict[str, Any], request_id: Any = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _v1_message(text: str, metadata: dict[str, Any]) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}],
            "metadata": metadata}  # fmt: skip


# binding -> (path, body for a streaming send, 0.3 or 1.0, JSON-RPC)
def _request(binding: str, text: str, metadata: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    canonical = {"message": message(text, metadata=metadata)}
    if binding == "rest":
        return "/v1/message:stream", canonical
    if binding == "jsonrpc-0.3":
        return "/", rpc("message/stream", canonical)
    if binding == "rest-0.3":
        proto = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                 "content": [{"text": text}], "metadata": metadata}  # fmt: skip
        return "/a2a/v1/message:stream", {"request": proto}
    if binding == "rest-1.0":
        return "/a2a/message:stream", {"message": _v1_message(text, metadata)}
    return "/", rpc("SendStreamingMessage", {"message": _v1_message(text, metadata)})


def normal(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(task | status | artifact, the event) whatever the binding's shape."""
    if data.get("jsonrpc"):
        assert "error" not in data, data
        data = data["result"]
    kinds = {"task": "task", "status-update": "status", "artifact-update": "artifact"}
    if "kind" in data:
        return kinds[data["kind"]], data
    ((key, payload),) = data.items()
    return {"task": "task", "statusUpdate": "status", "artifactUpdate": "artifact"}[key], payload


def state(kind: str, payload: dict[str, Any]) -> str:
    raw: str = payload["status"]["state"]
    return raw.removeprefix("TASK_STATE_").lower().replace("_", "-")


def streamed_text(received: list[tuple[str, dict[str, Any]]], name: str = "echo-stream") -> str:
    """The text of the named artifact as a client builds it from the events it got: from
    the task as it stood when the stream began (on a busy host the run may already have
    streamed its first chunks), then each chunk (``append`` adds, otherwise the artifact
    starts again)."""
    text = ""
    for kind, payload in received:
        if kind == "task":
            for artifact in payload.get("artifacts") or []:
                if artifact.get("name") == name:
                    text = "".join(p.get("text", "") for p in artifact["parts"])
        if kind == "artifact" and payload["artifact"].get("name") == name:
            pieces = "".join(p.get("text", "") for p in payload["artifact"]["parts"])
            text = text + pieces if payload.get("append") else pieces
    return text


@pytest.mark.parametrize("binding", ["rest", "jsonrpc-0.3", "rest-0.3", "rest-1.0", "jsonrpc-1.0"])
async def test_a_streaming_send_on_every_binding(gw: httpx.AsyncClient, binding: str) -> None:
    path, body = _request(binding, TEXT, echo(5, 250))
    async with gw.stream("POST", path, json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["cache-control"] == "no-store"  # events carry PHI: no cache keeps them
        got = await collect(r)
    received = [normal(e.data) for e in got]
    assert all(e.id for e in got)
    assert [e.id for e in got] == sorted(
        set(e.id for e in got), key=lambda i: tuple(map(int, (i or "").split("-")))
    )
    # The task first; the chunks in order, one artifact; the turn's end last.
    assert received[0][0] == "task"
    chunks = [p for k, p in received if k == "artifact" and p["artifact"]["name"] == "echo-stream"]
    assert len(chunks) == 5
    assert [bool(c.get("append")) for c in chunks] == [False, True, True, True, True]
    assert [bool(c.get("lastChunk")) for c in chunks] == [False, False, False, False, True]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    kind, last = received[-1]
    assert kind == "status" and state(kind, last) == "completed"
    if binding.endswith("1.0"):
        assert "final" not in last
    else:
        assert last["final"] is True
        assert all(p["final"] is False for k, p in received[1:-1] if k == "status")
    # What was stored is what the chunks add up to, once.
    assert streamed_text(received) == TEXT
    tid = received[0][1]["id"]
    stored = (await gw.get(f"/v1/tasks/{tid}")).json()
    texts = [a["parts"] for a in stored["artifacts"] if a["name"] == "echo-stream"]
    assert texts == [[{"kind": "text", "text": TEXT}]]


async def _until_chunks(stream: AsyncIterator[Sse], n: int) -> list[Sse]:
    seen: list[Sse] = []
    async for e in stream:
        if e.comment is not None:
            continue
        seen.append(e)
        if sum(1 for x in seen if normal(x.data)[0] == "artifact") >= n:
            return seen
    raise AssertionError("the stream ended early")


async def test_resubscribe_with_last_event_id_resumes_without_gap_or_duplicate(
    gw: httpx.AsyncClient,
) -> None:
    path, body = _request("jsonrpc-0.3", TEXT, echo(6, 1500))
    async with gw.stream("POST", path, json=body) as r:
        first = await _until_chunks(events(r), 2)
    # The client went away: the run goes on; a resubscription picks up after its last id.
    tid = normal(first[0].data)[1]["id"]
    resume = {"Last-Event-ID": first[-1].id or ""}
    async with gw.stream(
        "POST", "/", json=rpc("tasks/resubscribe", {"id": tid}), headers=resume
    ) as r:
        rest = await collect(r)
    ids = [e.id for e in first + rest]
    assert len(ids) == len(set(ids))
    assert normal(rest[0].data)[0] != "task"  # resumed: no snapshot
    received = [normal(e.data) for e in first + rest]
    assert streamed_text(received) == TEXT
    assert state(*received[-1]) == "completed"
    # The whole log again, from the first event on (any binding): the same events.
    resume = {"Last-Event-ID": first[0].id or ""}
    async with gw.stream("GET", f"/a2a/v1/tasks/{tid}:subscribe", headers=resume) as r:
        replay = await collect(r)
    assert [e.id for e in replay] == ids[1:]


async def test_a_task_is_logged_from_its_first_reader_on(
    gw: httpx.AsyncClient, redis: RawRedis
) -> None:
    """A task no one follows writes no event log: a blocking send's answer is the task. A
    reader that joins a run under way gets the task as it stands, then every change after
    it, and can resume from any of them."""
    done = (await gw.post("/v1/message:send", json={"message": message(TEXT)})).json()["task"]
    assert done["status"]["state"] == "completed" and done["artifacts"]
    assert not [k async for k in redis.scan_iter(match="gw:*:ev:*")]
    body = {"message": message(TEXT, metadata=echo(4, 1500)), "configuration": {"blocking": False}}
    tid = (await gw.post("/v1/message:send", json=body)).json()["task"]["id"]
    async with gw.stream("GET", f"/v1/tasks/{tid}:subscribe") as r:
        seen = await collect(r)
    received = [normal(e.data) for e in seen]
    assert received[0][0] == "task" and "artifact" in [kind for kind, _ in received]
    assert state(*received[-1]) == "completed"
    assert streamed_text(received) == TEXT
    assert [k async for k in redis.scan_iter(match=f"gw:*:ev:{tid}")]
    # The log holds what came after the snapshot: from its first event on, the rest.
    resume = {"Last-Event-ID": seen[1].id or ""}
    async with gw.stream("GET", f"/v1/tasks/{tid}:subscribe", headers=resume) as r:
        replay = await collect(r)
    assert [e.id for e in replay] == [e.id for e in seen[2:]]


async def test_subscribing_to_an_ended_task_and_to_another_users_task(
    gw: httpx.AsyncClient,
) -> None:
    path, body = _request("rest", TEXT, echo(2, 300))  # a run slower than the snapshot
    async with gw.stream("POST", path, json=body) as r:
        sent = await collect(r)
    tid = sent[0].data["id"]
    assert len(sent) > 2
    # 0.3: the final state, then the end.
    for method in ("GET", "POST"):
        async with gw.stream(method, f"/v1/tasks/{tid}:subscribe") as r:
            only = await collect(r)
        assert [normal(e.data)[0] for e in only] == ["task"]
        assert only[0].data["status"]["state"] == "completed"
    async with gw.stream("POST", "/", json=rpc("tasks/resubscribe", {"id": tid})) as r:
        assert [state(*normal(e.data)) for e in await collect(r)] == ["completed"]
    # 1.0: UnsupportedOperationError, as the spec says.
    r = await gw.post(f"/a2a/tasks/{tid}:subscribe")
    assert r.status_code == 501
    assert r.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"
    async with gw.stream("POST", "/", json=rpc("SubscribeToTask", {"id": tid})) as r:
        (err,) = await collect(r)
    assert err.data["error"]["code"] == -32004 and err.data["id"] == 7
    # ...unless it asks for events it missed, which the log still holds.
    resume = {"Last-Event-ID": sent[-2].id or ""}
    async with gw.stream("GET", f"/a2a/tasks/{tid}:subscribe", headers=resume) as r:
        (last,) = await collect(r)
    assert last.id == sent[-1].id and state(*normal(last.data)) == "completed"
    # Another user's task does not exist for them, on every binding.
    bob = auth("bob")
    assert (await gw.get(f"/v1/tasks/{tid}:subscribe", headers=bob)).status_code == 404
    assert (await gw.get(f"/a2a/v1/tasks/{tid}:subscribe", headers=bob)).status_code == 404
    r = await gw.post(f"/a2a/tasks/{tid}:subscribe", headers=bob)
    assert r.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
    for method in ("tasks/resubscribe", "SubscribeToTask"):
        async with gw.stream("POST", "/", json=rpc(method, {"id": tid}), headers=bob) as r:
            (err,) = await collect(r)
        assert err.data["error"]["code"] == -32001
    # A refusal comes before the stream starts (REST) or as its only event (JSON-RPC).
    r = await gw.post("/a2a/message:stream", json={"message": {"role": "ROLE_USER"}})
    assert r.status_code == 400
    batch = [rpc("message/stream", {"message": message("x")})]
    assert (await gw.post("/", json=batch)).json()[0]["error"]["code"] == -32004


async def test_a_stalled_reader_holds_back_neither_the_run_nor_another_reader(
    gw: httpx.AsyncClient,
) -> None:
    long_text = "x" * 4000
    path, body = _request("rest", long_text, echo(200, 400))
    async with gw.stream("POST", path, json=body) as stalled:
        # This client reads nothing more; another one follows the task at full speed.
        stalled_events = events(stalled)
        first = await anext(stalled_events)
        tid = first.data["id"]
        async with gw.stream("GET", f"/v1/tasks/{tid}:subscribe") as fast:
            fast_events = await collect(fast)
        assert state(*normal(fast_events[-1].data)) == "completed"
        task = (await gw.get(f"/v1/tasks/{tid}")).json()
        assert task["status"]["state"] == "completed"
        # The stalled reader, once it reads again, gets every event, in order, from Redis.
        rest = [e async for e in stalled_events if e.comment is None]
    received = [normal(e.data) for e in [first, *rest]]
    assert streamed_text(received) == long_text
    # The fast reader began later (from a snapshot): its events are the tail of these.
    ids, fast_ids = [e.id for e in rest], [e.id for e in fast_events[1:]]
    assert fast_ids and ids[len(ids) - len(fast_ids) :] == fast_ids


async def test_keep_alives_a_client_leaving_and_the_ends_of_a_stream(
    gw: httpx.AsyncClient,
) -> None:
    # A client that goes away does not cancel the run.
    path, body = _request("rest", TEXT, echo(3, 900))
    async with gw.stream("POST", path, json=body) as r:
        tid = (await anext(events(r))).data["id"]

    async def completed() -> bool:
        return bool((await gw.get(f"/v1/tasks/{tid}")).json()["status"]["state"] == "completed")

    await until(completed, what="the run to finish without its streaming client")
    # An idle stream gets keep-alive comments; a cancel ends it.
    path, body = _request("rest", TEXT, {"echo": {"finalState": "working"}})
    async with gw.stream("POST", path, json=body) as r:
        stream = events(r)
        tid = (await anext(stream)).data["id"]
        async for e in stream:
            if e.comment == "keep-alive":
                break
        assert (await gw.post(f"/v1/tasks/{tid}:cancel")).status_code == 200
        tail = [e async for e in stream if e.comment is None]
    assert state(*normal(tail[-1].data)) == "canceled" and tail[-1].data["final"] is True
    # A scrub ends the streams of its tasks.
    path, body = _request("rest", TEXT, {"echo": {"finalState": "working"}})
    async with gw.stream("POST", path, json=body) as r:
        stream = events(r)
        task = (await anext(stream)).data
        deleted = asyncio.create_task(gw.delete(f"/v1/contexts/{task['contextId']}"))
        tail = [e async for e in stream if e.comment is None]
        assert (await deleted).status_code == 204
    assert all(normal(e.data)[0] != "task" for e in tail)


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
    path, body = _request("rest", TEXT, {"echo": {"finalState": "working"}})
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
    _, body = _request("jsonrpc-0.3", TEXT, echo(8, 8000))
    async with httpx.AsyncClient(timeout=60, headers=auth("alice")) as c:
        with serving(tmp_path, **env) as (a, base_a):
            async with c.stream("POST", f"{base_a}/", json=body) as r:
                seen = await _until_chunks(events(r), 3)
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
    path, body = _request("rest", TEXT, {"echo": {"finalState": "working"}})
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


async def test_the_event_log_and_the_streamed_artifact_are_sealed(
    gw: httpx.AsyncClient, redis: RawRedis
) -> None:
    secret = "Sentinel-4f1c diagnosis text that must not be stored in clear"
    path, body = _request("rest", secret, echo(4, 2000))
    async with gw.stream("POST", path, json=body) as r:
        stream = events(r)
        seen = await _until_chunks(stream, 2)  # mid-stream: the artifact so far is stored
        stored: list[bytes] = []
        async for key in redis.scan_iter(match="gw:*"):
            kind = await redis.type(key)
            if kind == b"stream":
                stored += [v for _, fields in await redis.xrange(key) for v in fields.values()]
            elif kind == b"hash":
                stored += list((await redis.hgetall(key)).values())
        rest = [e async for e in stream if e.comment is None]
    assert [k async for k in redis.scan_iter(match="gw:*:ev:*")]
    assert not [v for v in stored if b"Sentinel-4f1c" in v or b"diagnosis" in v]
    assert streamed_text([normal(e.data) for e in seen + rest]) == secret
