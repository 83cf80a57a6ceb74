"""Streaming: a send's task events as server-sent events on every binding, resubscription
with Last-Event-ID, keep-alives, slow readers, isolation. Served over real HTTP (uvicorn
in this process): streams are read while they are under way."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.conftest import RawRedis, auth, message
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


@pytest.mark.parametrize("binding", ["rest", "jsonrpc-0.3", "rest-0.3", "rest-1.0", "jsonrpc-1.0"])
async def test_a_streaming_send_on_every_binding(gw: httpx.AsyncClient, binding: str) -> None:
    path, body = request_on(binding, TEXT, echo(5, 250))
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


async def test_resubscribe_with_last_event_id_resumes_without_gap_or_duplicate(
    gw: httpx.AsyncClient,
) -> None:
    path, body = request_on("jsonrpc-0.3", TEXT, echo(6, 1500))
    async with gw.stream("POST", path, json=body) as r:
        first = await until_chunks(events(r), 2)
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
    path, body = request_on("rest", TEXT, echo(2, 300))  # a run slower than the snapshot
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
    path, body = request_on("rest", long_text, echo(200, 400))
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
    path, body = request_on("rest", TEXT, echo(3, 900))
    async with gw.stream("POST", path, json=body) as r:
        tid = (await anext(events(r))).data["id"]

    async def completed() -> bool:
        return bool((await gw.get(f"/v1/tasks/{tid}")).json()["status"]["state"] == "completed")

    await until(completed, what="the run to finish without its streaming client")
    # An idle stream gets keep-alive comments; a cancel ends it.
    path, body = request_on("rest", TEXT, {"echo": {"finalState": "working"}})
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
    path, body = request_on("rest", TEXT, {"echo": {"finalState": "working"}})
    async with gw.stream("POST", path, json=body) as r:
        stream = events(r)
        task = (await anext(stream)).data
        deleted = asyncio.create_task(gw.delete(f"/v1/contexts/{task['contextId']}"))
        tail = [e async for e in stream if e.comment is None]
        assert (await deleted).status_code == 204
    assert all(normal(e.data)[0] != "task" for e in tail)


async def test_the_event_log_and_the_streamed_artifact_are_sealed(
    gw: httpx.AsyncClient, redis: RawRedis
) -> None:
    secret = "Sentinel-4f1c diagnosis text that must not be stored in clear"
    path, body = request_on("rest", secret, echo(4, 2000))
    async with gw.stream("POST", path, json=body) as r:
        stream = events(r)
        seen = await until_chunks(stream, 2)  # mid-stream: the artifact so far is stored
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
