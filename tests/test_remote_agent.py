"""The `a2a-remote` agent against a real A2A agent built with the official a2a-sdk (a 0.3
agent, and a 1.0 agent that serves one binding only): send, multi-turn continuation, a
non-blocking remote task polled to the end, cancel, failure."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from tests.a2a_remote_server import RemoteAgentServer
from tests.clients.sdk1x import Remote1x
from tests.conftest import API_KEYS, AppFactory, auth, message, send_task
from tests.sse import collect
from tests.waiting import until


@pytest.fixture(params=["JSONRPC", "HTTP+JSON", "1.0 JSONRPC", "1.0 HTTP+JSON"])
def remote(request: pytest.FixtureRequest) -> Iterator[RemoteAgentServer]:
    """A remote agent of the official a2a-sdk: 0.3 in process, or 1.0 (a card with 1.0
    interfaces only, one binding each) served from the a2a-sdk 1.x environment."""
    version, _, binding = str(request.param).rpartition(" ")
    server: Any = Remote1x(binding) if version else RemoteAgentServer(binding)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def gateway(make_app: AppFactory, remote: RemoteAgentServer) -> Any:
    @asynccontextmanager
    async def build(**config: Any) -> AsyncIterator[httpx.AsyncClient]:
        async with make_app(
            api_keys=orjson.dumps(API_KEYS).decode(),
            outbound_allowlist=f"127.0.0.1:{remote.port}",
        ) as c:
            spec = {
                "id": "cardio",
                "name": "Cardiology",
                "type": "a2a-remote",
                "config": {"cardUrl": remote.card_url, "pollIntervalSeconds": 0.05, **config},
            }
            r = await c.post("/agents", json=spec, headers=auth("admin"))
            assert r.status_code == 201, r.text
            yield c

    return build


async def send(c: httpx.AsyncClient, text: str, blocking: bool = True, **fields: Any) -> Any:
    return await send_task(
        c,
        text,
        agent="cardio",
        configuration={"blocking": blocking},
        headers=auth("alice"),
        **fields,
    )


async def read(c: httpx.AsyncClient, task_id: str) -> Any:
    return (await c.get(f"/agents/cardio/v1/tasks/{task_id}", headers=auth("alice"))).json()


async def test_a_send_is_forwarded_and_mirrored(gateway: Any, remote: RemoteAgentServer) -> None:
    async with gateway() as c:
        task = await send(c, "troponin 0.8, chest pain")
        full = await read(c, task["id"])
    assert task["status"]["state"] == "completed"
    assert task["artifacts"] == [
        {
            "artifactId": task["artifacts"][0]["artifactId"],
            "name": "opinion",
            "parts": [{"kind": "text", "text": "specialist opinion on: troponin 0.8, chest pain"}],
        }
    ]
    seen = remote.seen[0]
    assert seen["text"] == "troponin 0.8, chest pain"
    assert full["metadata"]["remote"] == {
        "contextId": seen["contextId"],
        "taskId": seen["taskId"],
        "state": "completed",
    }
    assert full["history"][-1]["parts"] == [{"kind": "text", "text": "Opinion attached."}]


async def test_multi_turn_continuation(gateway: Any, remote: RemoteAgentServer) -> None:
    async with gateway() as c:
        asked = await send(c, "ask about this ECG")
        assert asked["status"]["state"] == "input-required"
        full = await read(c, asked["id"])
        assert full["history"][-1]["parts"][0]["text"] == "Which ward is the patient on?"
        answered = await send(c, "ward 7B", taskId=asked["id"], contextId=asked["contextId"])
        later = await send(c, "and the echo?", contextId=asked["contextId"])
    assert answered["status"]["state"] == "completed" and answered["id"] == asked["id"]
    first, second, third = remote.seen
    assert second["taskId"] == first["taskId"]  # the remote task was continued
    assert second["contextId"] == first["contextId"] == third["contextId"]  # one remote context
    assert third["taskId"] != first["taskId"]  # a new gateway task is a new remote task
    assert later["status"]["state"] == "completed"


async def test_a_non_blocking_remote_task_is_polled(
    gateway: Any, remote: RemoteAgentServer
) -> None:
    async with gateway(blocking=False) as c:
        task = await send(c, "slow review please")
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"][0]["text"] == "specialist opinion on: slow review please"


async def test_cancel_is_forwarded(gateway: Any, remote: RemoteAgentServer) -> None:
    async with gateway(blocking=False) as c:
        task = await send(c, "hang on", blocking=False)

        async def forwarded() -> bool:
            return bool(remote.seen) and (await read(c, task["id"]))["status"]["state"] == "working"

        await until(forwarded, what="the task to be forwarded and working")
        r = await c.post(f"/agents/cardio/v1/tasks/{task['id']}:cancel", headers=auth("alice"))
        assert r.status_code == 200 and r.json()["status"]["state"] == "canceled"
        await until(lambda: remote.canceled, what="the cancel to reach the remote agent")
    assert remote.canceled == [remote.seen[0]["taskId"]]


async def test_a_cancel_during_the_send_reaches_the_task_the_remote_then_starts(
    gateway: Any, remote: RemoteAgentServer
) -> None:
    """Canceled while the remote is still answering the send: the cancel waits for the
    remote task's id and is forwarded to it, so the remote does not work on forever."""
    async with gateway(blocking=False) as c:
        task = await send(c, "late review", blocking=False)
        await until(lambda: remote.seen, what="the message to reach the remote agent")
        r = await c.post(f"/agents/cardio/v1/tasks/{task['id']}:cancel", headers=auth("alice"))
        assert r.status_code == 200 and r.json()["status"]["state"] == "canceled"
        await until(lambda: remote.canceled, what="the cancel to reach the remote agent")
    assert remote.canceled == [remote.seen[0]["taskId"]]


async def test_remote_failures_surface_as_failed(gateway: Any, remote: RemoteAgentServer) -> None:
    async with gateway() as c:
        failed = await send(c, "fail please")
        remote.stop()
        unreachable = await send(c, "anyone there?")
    assert failed["status"]["state"] == "failed"
    assert failed["status"]["message"]["parts"][0]["text"] == "Specialist database unavailable."
    assert unreachable["status"]["state"] == "failed"
    assert "could not be reached" in unreachable["status"]["message"]["parts"][0]["text"]


async def test_no_recall_for_a_remote_agent_but_its_turns_are_stored(
    make_app: AppFactory, remote: RemoteAgentServer
) -> None:
    from gateway.options.longterm import CortadelSettings
    from tests.cortadel_server import CortadelServer

    cortadel = CortadelServer().start()
    try:
        settings = CortadelSettings(url=cortadel.url, api_key="cortadel-key")
        async with make_app(
            api_keys=orjson.dumps(API_KEYS).decode(),
            outbound_allowlist=f"127.0.0.1:{remote.port}",
            cortadel=settings,
        ) as c:
            spec = {"id": "cardio", "name": "Cardiology", "type": "a2a-remote",
                    "config": {"cardUrl": remote.card_url}}  # fmt: skip
            assert (await c.post("/agents", json=spec, headers=auth("admin"))).status_code == 201
            task = await send(c, "murmur on auscultation")
            await until(
                lambda: cortadel.calls_to("/api/v1/memories/from-conversation"),
                what="the turn to be stored",
            )
        assert task["status"]["state"] == "completed"
        assert cortadel.calls_to("/api/v1/memories/search") == []
        stored = cortadel.calls_to("/api/v1/memories/from-conversation")[0]["body"]["messages"]
        assert stored[0] == {
            "role": "user",
            "content": "murmur on auscultation",
            "uuid": stored[0]["uuid"],
        }
        assert cortadel.errors == []
    finally:
        cortadel.stop()


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON", "1.0 JSONRPC", "1.0 HTTP+JSON"])
async def test_a_remote_agents_stream_is_relayed(make_app: AppFactory, binding: str) -> None:
    version, _, binding = binding.rpartition(" ")
    served: Any = Remote1x if version else RemoteAgentServer
    remote = served(binding, streaming=True).start()
    try:
        async with make_app(
            api_keys=orjson.dumps(API_KEYS).decode(),
            outbound_allowlist=f"127.0.0.1:{remote.port}",
        ) as c:
            spec = {"id": "cardio", "name": "Cardiology", "type": "a2a-remote",
                    "config": {"cardUrl": remote.card_url}}  # fmt: skip
            assert (await c.post("/agents", json=spec, headers=auth("admin"))).status_code == 201
            body = {"message": message("chunks: troponin 0.8")}
            async with c.stream("POST", "/agents/cardio/v1/message:stream", json=body,
                                headers=auth("alice")) as r:  # fmt: skip
                got = await collect(r)
            stored = await read(c, got[0].data["id"])
            plain = await send(c, "troponin 0.8")  # a whole artifact, streamed once too
    finally:
        remote.stop()
    chunks = [e.data for e in got if e.data.get("kind") == "artifact-update"]
    assert [(c["append"], c["lastChunk"]) for c in chunks] == [
        (False, False), (True, False), (True, True)
    ]  # fmt: skip
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == [
        "specialist ", "opinion on: ", "chunks: troponin 0.8"
    ]  # fmt: skip
    assert got[-1].data["status"]["state"] == "completed"
    # Stored once: the relayed chunks' concatenation, not mirrored again at the end.
    assert [(a["name"], a["parts"]) for a in stored["artifacts"]] == [
        ("opinion", [{"kind": "text", "text": "specialist opinion on: chunks: troponin 0.8"}])
    ]
    assert stored["history"][-1]["parts"] == [{"kind": "text", "text": "Opinion attached."}]
    assert [a["parts"][0]["text"] for a in plain["artifacts"]] == [
        "specialist opinion on: troponin 0.8"
    ]


async def test_a_gateway_reads_a_remote_card_for_itself(make_app: AppFactory) -> None:
    """Cards are cached per gateway: a new gateway in the same process (as an app and its
    tests) reads the card afresh, here a 0.3 agent now where a 1.0 agent was."""

    async def answer(remote: Any, agent: str) -> Any:
        async with make_app(
            api_keys=orjson.dumps(API_KEYS).decode(),
            outbound_allowlist=f"127.0.0.1:{remote.port}",
        ) as c:
            spec = {"id": agent, "name": "Cardiology", "type": "a2a-remote",
                    "config": {"cardUrl": remote.card_url}}  # fmt: skip
            assert (await c.post("/agents", json=spec, headers=auth("admin"))).status_code == 201
            return await send_task(c, "troponin 0.8", agent=agent, headers=auth("alice"))

    first = Remote1x("JSONRPC").start()
    try:
        assert (await answer(first, "cardio-1"))["status"]["state"] == "completed"
    finally:
        first.stop()
    second = RemoteAgentServer("JSONRPC", port=first.port).start()
    try:
        task = await answer(second, "cardio-2")
    finally:
        second.stop()
    assert task["status"]["state"] == "completed", task["status"]
    assert [s["text"] for s in second.seen] == ["troponin 0.8"]
