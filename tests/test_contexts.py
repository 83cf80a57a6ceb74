"""Listing, reading, expiring and scrubbing contexts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import httpx

from gateway.http.auth import LOCAL_PRINCIPAL
from gateway.store.keys import UserKeys
from tests.conftest import AppFactory, RawRedis, Send, runs_settled
from tests.waiting import until


async def _user_keys(redis: RawRedis) -> list[bytes]:
    """Every key of users and their contexts (the job queue's keys are global; the audit
    trail's streams are trimmed by age instead of expiring)."""
    return [
        k async for k in redis.scan_iter(count=1000) if not k.startswith((b"gw:{jobs}", b"gw:{au:"))
    ]


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


async def test_list_contexts_newest_first_and_paged(client: httpx.AsyncClient, send: Send) -> None:
    ids = [(await send(f"m{i}")).json()["task"]["contextId"] for i in range(5)]
    page = (await client.get("/v1/contexts", params={"limit": 2, "offset": 1})).json()
    assert page["total"] == 5 and page["limit"] == 2 and page["offset"] == 1
    assert [c["id"] for c in page["items"]] == [ids[3], ids[2]]
    item = page["items"][0]
    assert item["taskCount"] == 1
    assert _parse(item["expiresAt"]) > datetime.now(UTC)
    await send("again", contextId=ids[0])
    assert (await client.get("/v1/contexts")).json()["items"][0]["id"] == ids[0]


async def test_read_context_oldest_first_with_total(client: httpx.AsyncClient, send: Send) -> None:
    cid = (await send("t0")).json()["task"]["contextId"]
    for i in range(1, 5):
        await send(f"t{i}", contextId=cid)
    page = (await client.get(f"/v1/contexts/{cid}", params={"limit": 2, "offset": 1})).json()
    assert page["id"] == cid and page["total"] == 5 and page["limit"] == 2
    texts = [t["history"][0]["parts"][0]["text"] for t in page["items"]]
    assert texts == ["t1", "t2"]
    assert all(t["kind"] == "task" for t in page["items"])
    assert _parse(page["expiresAt"]) > datetime.now(UTC)


async def test_bad_paging_is_400(client: httpx.AsyncClient, send: Send) -> None:
    cid = (await send("x")).json()["task"]["contextId"]
    for query in ("limit=0", "limit=-1", "offset=-1", "limit=abc", "limit=100000"):
        for path in ("/v1/contexts", f"/v1/contexts/{cid}"):
            r = await client.get(f"{path}?{query}")
            assert r.status_code == 400, (path, query)
            assert r.json()["error"] == "InvalidParamsError"


async def test_delete_scrubs_every_key(
    client: httpx.AsyncClient, send: Send, redis: RawRedis
) -> None:
    keep = (await send("keep")).json()["task"]
    first = (await send("a", message_id="origin-mid")).json()["task"]
    cid = first["contextId"]
    second = (await send("b", contextId=cid, referenceTaskIds=[first["id"]])).json()["task"]
    before = {k async for k in redis.scan_iter(count=1000)}
    assert (await client.delete(f"/v1/contexts/{cid}")).status_code == 204
    after = {k async for k in redis.scan_iter(count=1000)}
    for key in after:
        assert cid.encode() not in key
        kind = await redis.type(key)
        if kind == b"hash":
            values = await redis.hgetall(key)
            flat = b" ".join([*values.keys(), *values.values()])
            for ident in (cid, first["id"], second["id"], "origin-mid"):
                assert ident.encode() not in flat, (key, ident)
        elif kind == b"zset":
            assert cid.encode() not in await redis.zrange(key, 0, -1)
    assert len(before) > len(after)
    for r in (
        await client.get(f"/v1/contexts/{cid}"),
        await client.delete(f"/v1/contexts/{cid}"),
        await send("c", contextId=cid),
    ):
        assert r.status_code == 404
        assert r.json()["error"] == "ContextNotFoundError"
    assert (await client.get(f"/v1/tasks/{first['id']}")).status_code == 404
    assert (await client.get(f"/v1/tasks/{keep['id']}")).status_code == 200
    assert [c["id"] for c in (await client.get("/v1/contexts")).json()["items"]] == [
        keep["contextId"]
    ]


async def test_delete_cancels_running_task_and_nothing_resurrects(
    client: httpx.AsyncClient, send: Send, redis: RawRedis
) -> None:
    meta = {"echo": {"delayMs": 2000, "steps": 2}}  # long enough to be caught mid-run
    task = (await send("x", metadata=meta, configuration={"blocking": False})).json()["task"]

    async def running() -> bool:
        got = (await client.get(f"/v1/tasks/{task['id']}")).json()
        assert got["status"]["state"] != "completed", "the run ended before the delete"
        return bool(got["status"]["state"] == "working")

    await until(running, what="the run to start")
    assert (await client.delete(f"/v1/contexts/{task['contextId']}")).status_code == 204
    await until(lambda: runs_settled(redis), what="the canceled run to end")
    keys = [k async for k in redis.scan_iter(count=1000)]
    for key in keys:
        assert task["contextId"].encode() not in key
    assert (await client.get(f"/v1/tasks/{task['id']}")).status_code == 404
    assert (await client.get("/v1/contexts")).json()["total"] == 0


async def test_every_key_has_ttl_within_retention(make_app: AppFactory, redis: RawRedis) -> None:
    async with make_app(context_ttl_seconds=1000) as c:
        body = {
            "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}], "messageId": "1"}
        }
        cid = (await c.post("/v1/message:send", json=body)).json()["task"]["contextId"]
        body["message"].update(messageId="2", contextId=cid)
        await c.post("/v1/message:send", json=body)
    keys = await _user_keys(redis)
    assert len(keys) >= 6
    for key in keys:
        ttl = await redis.pttl(key)
        assert 0 < ttl <= 1000 * 1000, key


async def test_a_retention_of_thousands_of_years_is_set_exactly(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """The scripts hand Redis the TTL as an integer's text however large it is (from 10^14 ms
    on, Lua's own number formatting writes 1e+14, which Redis refuses)."""
    ttl_s = 10**11
    async with make_app(context_ttl_seconds=ttl_s) as c:
        body = {
            "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}], "messageId": "1"}
        }
        first = await c.post("/v1/message:send", json=body)
        assert first.status_code == 200, first.text
        task = first.json()["task"]
        assert task["status"]["state"] == "completed"
        body["message"].update(messageId="2", contextId=task["contextId"])
        second = await c.post("/v1/message:send", json=body)
        assert second.status_code == 200, second.text
        assert second.json()["task"]["status"]["state"] == "completed"
    keys = await _user_keys(redis)
    assert len(keys) >= 6
    for key in keys:
        ttl = await redis.pttl(key)
        if b":ev:" in key:  # a settled task's event log stays a few minutes
            assert 0 < ttl <= 600_000, key
        else:
            assert ttl_s * 1000 - 600_000 < ttl <= ttl_s * 1000, key


async def test_context_expires_after_retention(make_app: AppFactory, redis: RawRedis) -> None:
    async with make_app(context_ttl_seconds=2, client_context_ids="refuse") as c:
        body = {
            "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}], "messageId": "1"}
        }
        task = (await c.post("/v1/message:send", json=body)).json()["task"]
        assert (await c.get(f"/v1/contexts/{task['contextId']}")).status_code == 200
        await asyncio.sleep(2.3)
        assert (await c.get(f"/v1/contexts/{task['contextId']}")).status_code == 404
        assert (await c.get(f"/v1/tasks/{task['id']}")).status_code == 404
        body["message"].update(messageId="2", contextId=task["contextId"])
        assert (await c.post("/v1/message:send", json=body)).status_code == 404
        assert (await c.get("/v1/contexts")).json()["items"] == []
    assert await _user_keys(redis) == []


async def test_keys_created_by_a_later_write_expire_with_their_context(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """A write refreshes the TTL of every key of its context only once the context has lost
    some of it; a key created by a write in between (here the context memory's vectors,
    written after the sends) takes the context's remaining TTL: none outlives the context."""
    async with make_app(context_ttl_seconds=1000, embedder="hashing") as c:
        body = {
            "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}], "messageId": "1"}
        }
        cid = (await c.post("/v1/message:send", json=body)).json()["task"]["contextId"]
        body["message"].update(messageId="2", contextId=cid, parts=[{"kind": "text", "text": "y"}])
        assert (await c.post("/v1/message:send", json=body)).status_code == 200

        async def indexed() -> bool:
            memory = (await c.get(f"/v1/contexts/{cid}")).json()["memory"]
            return bool(memory["pending"] == 0)

        await until(indexed, what="the context's messages to be embedded")
    keys = [k async for k in redis.scan_iter(match=f"*{cid}*", count=1000)]
    assert any(k.endswith(b":vec") for k in keys), keys
    meta = next(k for k in keys if k.endswith(cid.encode()))
    for key in keys:
        left = await redis.pttl(meta)  # read first: the key's TTL, read after, is no longer
        assert 0 < await redis.pttl(key) <= left + 1, key


async def test_writes_slide_the_retention(make_app: AppFactory, redis: RawRedis) -> None:
    """Each write to a context sets its retention back to the full TTL, so a context kept
    in use outlives its first retention, while one left alone, opened just after it, expires.

    Writes are timed by the context's remaining TTL in Redis, not by sleeping: each comes
    once it has fallen to ``slide_at_ms``, leaving that much time for the send to land."""
    ttl_ms, slide_at_ms = 6000, 3500
    async with make_app(context_ttl_seconds=ttl_ms // 1000) as c:
        body = {
            "message": {"role": "user", "parts": [{"kind": "text", "text": "x"}], "messageId": "1"}
        }
        task = (await c.post("/v1/message:send", json=body)).json()["task"]
        cid = task["contextId"]
        meta = UserKeys.of(LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user).meta(cid)
        # Opened after the first: it expires no sooner than the first's first retention.
        body["message"].update(messageId="left-alone")
        alone = (await c.post("/v1/message:send", json=body)).json()["task"]
        assert alone["contextId"] != cid

        async def low() -> int | None:
            left = int(await redis.pttl(meta))
            assert left > 0, f"the context in use expired (PTTL {left})"
            return left if left <= slide_at_ms else None

        async def alone_status() -> int:
            r = await c.get(f"/v1/contexts/{alone['contextId']}")  # a read does not slide
            assert r.status_code in (200, 404), r.text
            return r.status_code

        slides: list[tuple[int, int]] = []  # (PTTL before the write, PTTL after it)
        while await alone_status() == 200:
            assert len(slides) < 10, f"the context left alone never expired; slides: {slides}"
            left = await until(low, what=f"the context's TTL to fall to {slide_at_ms} ms")
            body["message"].update(messageId=f"n{len(slides)}", contextId=cid)
            assert (await c.post("/v1/message:send", json=body)).status_code == 200
            slides.append((left, int(await redis.pttl(meta))))
            assert left < slides[-1][1] <= ttl_ms, f"the write did not slide the TTL: {slides}"
        assert slides  # and the context in use, opened first, is still here:
        assert (await c.get(f"/v1/tasks/{task['id']}")).status_code == 200
        assert (await c.get(f"/v1/contexts/{cid}")).status_code == 200
        assert (await c.get(f"/v1/tasks/{alone['id']}")).status_code == 404
