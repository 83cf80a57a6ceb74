"""Quotas at their edges: messages and stored bytes per context, contexts per user — each
refused with 429 naming the quota, and nothing of a refused message stored."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from gateway.store.keys import UserKeys
from tests.conftest import (
    API_KEYS,
    AppFactory,
    RawRedis,
    auth,
    message,
    post_message,
    send_task,
)
from tests.test_openapi import conform

KEYS = orjson.dumps(API_KEYS).decode()


def _refused(r: httpx.Response, quota: str) -> None:
    assert r.status_code == 429, r.text
    conform(r, "/v1/message:send")
    body = r.json()
    assert body["error"] == "QuotaExceededError" and body["data"]["quota"] == quota
    assert quota in body["message"]


async def _context(gw: httpx.AsyncClient, cid: str) -> dict[str, Any]:
    """The context as read back, bar its expiry (computed at each read)."""
    page: dict[str, Any] = (await gw.get(f"/v1/contexts/{cid}", headers=auth("alice"))).json()
    page.pop("expiresAt", None)
    return page


async def test_messages_per_context(make_app: AppFactory) -> None:
    async with make_app(api_keys=KEYS, quota_messages_per_context=4) as gw:
        first = await send_task(gw, "one", headers=auth("alice"))  # the message and its reply
        cid = first["contextId"]
        replay_id = "m-second"
        await send_task(gw, "two", headers=auth("alice"), contextId=cid, message_id=replay_id)
        before = await _context(gw, cid)
        r = await post_message(gw, "three", headers=auth("alice"), contextId=cid)
        _refused(r, "messages_per_context")
        assert await _context(gw, cid) == before  # nothing half-written
        # A retry of a stored message is answered as before; a new context has room.
        again = await post_message(
            gw, "two", headers=auth("alice"), contextId=cid, message_id=replay_id
        )
        assert again.status_code == 200
        await send_task(gw, "elsewhere", headers=auth("alice"))


async def test_bytes_per_context(make_app: AppFactory, redis: RawRedis) -> None:
    async with make_app(api_keys=KEYS) as probe:
        task = await send_task(probe, "x" * 100, headers=auth("alice"))
        meta = UserKeys.of("t1", "alice").meta(task["contextId"])
        used = int(await redis.hget(meta, "bytes"))
    assert used > 200  # the message, the reply and the artifact all count
    async with make_app(api_keys=KEYS, quota_bytes_per_context=used + 600) as gw:
        first = await send_task(gw, "x" * 100, headers=auth("alice"))
        cid = first["contextId"]
        r = await post_message(gw, "y" * 700, headers=auth("alice"), contextId=cid)
        _refused(r, "bytes_per_context")
        tasks = (await gw.get(f"/v1/contexts/{cid}", headers=auth("alice"))).json()
        assert "y" * 700 not in orjson.dumps(tasks).decode()
        await send_task(gw, "small", headers=auth("alice"), contextId=cid)  # still room
        # One message larger than the quota opens no context at all.
        listed = (await gw.get("/v1/contexts", headers=auth("alice"))).json()["total"]
        r = await post_message(gw, "z" * (used + 700), headers=auth("alice"))
        _refused(r, "bytes_per_context")
        assert (await gw.get("/v1/contexts", headers=auth("alice"))).json()["total"] == listed


async def test_contexts_per_user(make_app: AppFactory) -> None:
    async with make_app(api_keys=KEYS, quota_contexts_per_user=2) as gw:
        a = await send_task(gw, "a", headers=auth("alice"))
        await send_task(gw, "b", headers=auth("alice"))
        _refused(await post_message(gw, "c", headers=auth("alice")), "contexts_per_user")
        assert (await gw.get("/v1/contexts", headers=auth("alice"))).json()["total"] == 2
        await send_task(gw, "more", headers=auth("alice"), contextId=a["contextId"])
        await send_task(gw, "bob has his own", headers=auth("bob"))
        assert (
            await gw.delete(f"/v1/contexts/{a['contextId']}", headers=auth("alice"))
        ).status_code == 204
        await send_task(gw, "room again", headers=auth("alice"))


async def test_running_tasks_per_user(make_app: AppFactory) -> None:
    async with make_app(api_keys=KEYS, quota_running_tasks_per_user=2) as gw:
        slow: dict[str, Any] = {
            "configuration": {"blocking": False},
            "metadata": {"echo": {"delayMs": 60_000}},
        }
        first = await post_message(gw, "one", headers=auth("alice"), **slow)
        second = await post_message(gw, "two", headers=auth("alice"), **slow)
        assert first.status_code == second.status_code == 200
        listed = (await gw.get("/v1/contexts", headers=auth("alice"))).json()["total"]
        _refused(await post_message(gw, "three", headers=auth("alice")), "running_tasks_per_user")
        assert (await gw.get("/v1/contexts", headers=auth("alice"))).json()["total"] == listed
        # Continuing a task whose run is under way starts no new run; bob has his own budget.
        task = first.json()["task"]
        more = await post_message(
            gw,
            "and",
            headers=auth("alice"),
            configuration={"blocking": False},
            contextId=task["contextId"],
            taskId=task["id"],
        )
        assert more.status_code == 200, more.text
        await send_task(gw, "bob", headers=auth("bob"))
        # A canceled run frees its place; so does a scrubbed context's.
        path = f"/v1/tasks/{task['id']}:cancel"
        assert (await gw.post(path, headers=auth("alice"))).status_code == 200
        third = await post_message(gw, "after cancel", headers=auth("alice"), **slow)
        assert third.status_code == 200, third.text
        _refused(await post_message(gw, "four", headers=auth("alice")), "running_tasks_per_user")
        gone = second.json()["task"]["contextId"]
        assert (await gw.delete(f"/v1/contexts/{gone}", headers=auth("alice"))).status_code == 204
        # Runs that finish free theirs: blocking sends one after the other never pass it.
        for i in range(3):
            assert (await send_task(gw, f"quick {i}", headers=auth("alice")))["status"][
                "state"
            ] == ("completed")


async def test_a_json_rpc_batch_meets_the_quotas_call_by_call(make_app: AppFactory) -> None:
    async with make_app(api_keys=KEYS, quota_contexts_per_user=2) as gw:
        batch = [
            {"jsonrpc": "2.0", "method": "message/send", "id": n, "params": {"message": message()}}
            for n in range(6)
        ]
        r = await gw.post("/", json=batch, headers=auth("alice"))
        assert r.status_code == 200, r.text
        answers = r.json()
        assert sum("result" in a for a in answers) == 2
        refused = [a["error"] for a in answers if "error" in a]
        assert len(refused) == 4
        assert all(e["data"]["data"]["quota"] == "contexts_per_user" for e in refused)
        assert (await gw.get("/v1/contexts", headers=auth("alice"))).json()["total"] == 2
