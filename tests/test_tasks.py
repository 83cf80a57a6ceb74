"""Polling and canceling tasks, at the root and per agent base."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.conftest import RawRedis, Send, runs_settled
from tests.waiting import until


async def test_get_task_returns_whole_history_by_default(
    client: httpx.AsyncClient, send: Send
) -> None:
    task = (await send("hello")).json()["task"]
    got = (await client.get(f"/v1/tasks/{task['id']}")).json()
    assert got["id"] == task["id"] and got["kind"] == "task"
    assert [m["role"] for m in got["history"]] == ["user", "agent"]
    assert got["history"][0]["parts"] == [{"kind": "text", "text": "hello"}]


@pytest.mark.parametrize(
    ("query", "roles"),
    [
        ("historyLength=0", None),
        ("historyLength=1", ["agent"]),
        ("history_length=5", ["user", "agent"]),
    ],
)
async def test_get_task_history_length(
    client: httpx.AsyncClient, send: Send, query: str, roles: list[str] | None
) -> None:
    task = (await send("hello")).json()["task"]
    got = (await client.get(f"/v1/tasks/{task['id']}?{query}")).json()
    assert [m["role"] for m in got.get("history", [])] == (roles or [])
    if roles is None:
        assert "history" not in got


@pytest.mark.parametrize("value", ["-1", "abc", "1.5"])
async def test_get_task_bad_history_length(
    client: httpx.AsyncClient, send: Send, value: str
) -> None:
    task = (await send("hello")).json()["task"]
    r = await client.get(f"/v1/tasks/{task['id']}?historyLength={value}")
    assert r.status_code == 400
    assert r.json()["error"] == "InvalidParamsError"


async def test_unknown_task_is_404(client: httpx.AsyncClient) -> None:
    for r in (await client.get("/v1/tasks/nope"), await client.post("/v1/tasks/nope:cancel")):
        assert r.status_code == 404
        assert r.json() == {
            "error": "TaskNotFoundError",
            "code": -32001,
            "message": "Task not found",
        }


@pytest.mark.parametrize("base", ["", "/agents/echo"])
async def test_cancel_running_task_stops_it(
    client: httpx.AsyncClient, send: Send, base: str
) -> None:
    meta = {"echo": {"finalState": "working"}}
    task = (await send("x", metadata=meta, configuration={"blocking": False})).json()["task"]

    async def working() -> bool:
        got = (await client.get(f"{base}/v1/tasks/{task['id']}")).json()
        return bool(got["status"]["state"] == "working")

    await until(working, what="the run to start")
    r = await client.post(f"{base}/v1/tasks/{task['id']}:cancel")
    assert r.status_code == 200
    assert r.json()["status"]["state"] == "canceled"
    again = await client.post(f"{base}/v1/tasks/{task['id']}:cancel", json={})
    assert again.status_code == 409
    assert again.json()["error"] == "TaskNotCancelableError"


async def test_cancel_mid_run_discards_late_results(
    client: httpx.AsyncClient, send: Send, redis: RawRedis
) -> None:
    meta = {"echo": {"delayMs": 2000, "steps": 1}}  # long enough to be caught mid-run
    task = (await send("x", metadata=meta, configuration={"blocking": False})).json()["task"]

    async def running() -> bool:
        got = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert got["status"]["state"] != "completed", "the run ended before the cancel"
        return bool(got["status"]["state"] == "working")

    await until(running, what="the run to start")
    assert (await client.post(f"/v1/tasks/{task['id']}:cancel")).status_code == 200
    await until(lambda: runs_settled(redis), what="the canceled run to end")
    got = (await client.get(f"/v1/tasks/{task['id']}")).json()
    assert got["status"]["state"] == "canceled"
    assert "artifacts" not in got
    assert [m["role"] for m in got["history"]] == ["user"]


async def test_blocking_send_returns_when_canceled_elsewhere(
    client: httpx.AsyncClient, send: Send
) -> None:
    meta = {"echo": {"finalState": "working"}}
    pending = asyncio.create_task(send("x", metadata=meta, message_id="blk"))

    async def listed_contexts() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = (await client.get("/v1/contexts")).json()["items"]
        return items

    listed = await until(listed_contexts, what="the send to create its context")
    page = (await client.get(f"/v1/contexts/{listed[0]['id']}")).json()
    tid = page["items"][0]["id"]
    await client.post(f"/v1/tasks/{tid}:cancel")
    r = await asyncio.wait_for(pending, 5)
    assert r.json()["task"]["status"]["state"] == "canceled"


async def test_cancel_of_completed_task_is_409(client: httpx.AsyncClient, send: Send) -> None:
    task = (await send("x")).json()["task"]
    r = await client.post(f"/v1/tasks/{task['id']}:cancel")
    assert r.status_code == 409
    assert r.json()["data"] == {"state": "completed"}
