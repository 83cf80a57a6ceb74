"""The audit trail: every authenticated operation and every denied attempt, per tenant,
read by admins with GET /audit — and never a word of content."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.audit.entry import hashed_id
from tests.conftest import API_KEYS, CLUSTER, AppFactory, RawRedis, auth, post_message, send_task
from tests.processes import PROCESS_SECONDS, serving, slow_process_test
from tests.test_jsonrpc import rpc
from tests.test_openapi import conform
from tests.waiting import until

SENTINEL = "PHI-SENTINEL-93c1d"
KEYS = orjson.dumps(API_KEYS).decode()


async def _entries(gw: httpx.AsyncClient, n: int, **params: Any) -> list[dict[str, Any]]:
    """The tenant's newest entries once at least ``n`` match (admin of t1)."""

    async def enough() -> list[dict[str, Any]] | None:
        r = await gw.get("/audit", params={"limit": 1000, **params}, headers=auth("admin"))
        assert r.status_code == 200, r.text
        items: list[dict[str, Any]] = r.json()["items"]
        return items if len(items) >= n else None

    found: list[dict[str, Any]] = await until(enough, what=f"{n} audit entries matching {params}")
    return found


async def _raw_streams(redis: RawRedis) -> bytes:
    out = b""
    async for name in redis.scan_iter(match="gw:{au:*"):
        for _, fields in await redis.xrange(name):
            out += b"".join(k + b"=" + v for k, v in fields.items())
    return out


async def test_each_operation_and_each_denied_attempt_is_recorded_without_content(
    make_app: AppFactory, redis: RawRedis, tmp_path: Path
) -> None:
    mirror = tmp_path / "audit.jsonl"
    async with make_app(api_keys=KEYS, api_key_secret="s" * 20, audit_mirror=str(mirror)) as gw:
        alice = auth("alice")
        task = await send_task(
            gw, f"patient {SENTINEL}", headers=alice, metadata={"note": SENTINEL}
        )
        tid, cid = task["id"], task["contextId"]
        assert (await gw.get(f"/v1/tasks/{tid}", headers=alice)).status_code == 200
        assert (await gw.post(f"/v1/tasks/{tid}:cancel", headers=alice)).status_code == 409
        assert (await gw.get("/v1/contexts", headers=alice)).status_code == 200
        assert (await gw.get(f"/v1/contexts/{cid}", headers=alice)).status_code == 200
        r = await gw.post(f"/v1/contexts/{cid}:search", json={"query": SENTINEL}, headers=alice)
        assert r.status_code == 200
        assert (await gw.delete(f"/v1/contexts/{cid}", headers=alice)).status_code == 204
        spec = {"id": "notes", "name": f"Notes {SENTINEL}", "type": "echo"}
        assert (await gw.post("/agents", json=spec, headers=auth("admin"))).status_code == 201
        key = await gw.post("/keys", json={"user": "dave", "name": SENTINEL}, headers=auth("admin"))
        assert key.status_code == 201
        # Denied: a wrong key (no tenant known), another tenant named, a non-admin.
        wrong = {"Authorization": f"Bearer {SENTINEL}"}
        assert (await gw.get("/v1/contexts", headers=wrong)).status_code == 401
        other = {**alice, "Tenant-Name": "t2"}
        assert (await gw.get(f"/v1/contexts/{cid}", headers=other)).status_code == 403
        assert (await gw.get("/audit", headers=alice)).status_code == 403

        entries = await _entries(gw, 11)
        ops = [(e["operation"], e["user"], e["status"], e["outcome"]) for e in reversed(entries)]
        assert ops[:11] == [
            ("send_message", "alice", 200, "ok"),
            ("get_task", "alice", 200, "ok"),
            ("cancel_task", "alice", 409, "failed"),
            ("list_contexts", "alice", 200, "ok"),
            ("read_context", "alice", 200, "ok"),
            ("search_context", "alice", 200, "ok"),
            ("delete_context", "alice", 204, "ok"),
            ("register_agent", "root", 201, "ok"),
            ("create_key", "root", 201, "ok"),
            ("read_context", "alice", 403, "denied"),
            ("read_audit", "alice", 403, "denied"),
        ]
        send = entries[-1]
        assert send["taskId"] == tid and send["contextId"] == cid and send["tenant"] == "t1"
        assert send["credential"].startswith("static:") and send["requestId"]
        assert all(e["contextId"] == cid for e in reversed(entries) if e["operation"] in
                   ("send_message", "get_task", "read_context", "search_context", "delete_context")
                   and e["status"] < 400)  # fmt: skip
        (denied,) = [e for e in entries if e["operation"] == "read_context" and e["status"] == 403]
        # The refused request's ids are kept as digests: found by the context filter.
        assert denied["contextId"] == hashed_id(cid) and denied["user"] == "alice"
        found = await _entries(gw, 1, context=cid, operation="read_context")
        assert {e["status"] for e in found} == {200, 403}
        # The 401 has no tenant: it is in the stream of unauthenticated attempts.
        anonymous = await redis.xrange("gw:{au:-}:audit")
        assert [f[b"status"] for _, f in anonymous] == [b"401"]
        page = await gw.get("/audit", headers=auth("admin"))
        conform(page, "/audit")
        assert SENTINEL not in page.text
    raw = await _raw_streams(redis)
    assert raw and SENTINEL.encode() not in raw
    mirrored = mirror.read_text()
    assert "send_message" in mirrored and "401" in mirrored and SENTINEL not in mirrored
    lines = [orjson.loads(line) for line in mirrored.splitlines()]
    assert {line["operation"] for line in lines} >= {"send_message", "delete_context"}


async def test_filters_and_cursor_paging(make_app: AppFactory) -> None:
    async with make_app(api_keys=KEYS) as gw:
        first = await send_task(gw, "a", headers=auth("alice"))
        cid = first["contextId"]
        for _ in range(4):
            await post_message(gw, "b", headers=auth("alice"), contextId=cid)
        await send_task(gw, "c", headers=auth("bob"))
        await _entries(gw, 6)
        mine = await _entries(gw, 5, user="alice", context=cid, operation="send_message")
        assert len(mine) == 5 and {e["contextId"] for e in mine} == {cid}
        seen: list[str] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 2, "operation": "send_message"}
            if cursor:
                params["cursor"] = cursor
            page = (await gw.get("/audit", params=params, headers=auth("admin"))).json()
            seen += [e["id"] for e in page["items"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == 6 and seen == sorted(seen, reverse=True)
        newest = mine[0]["time"]
        later = await gw.get("/audit", params={"since": newest}, headers=auth("admin"))
        assert all(e["time"] >= newest for e in later.json()["items"])
        before = await gw.get(
            "/audit", params={"until": "2000-01-01T00:00:00Z"}, headers=auth("admin")
        )
        assert before.json() == {"items": [], "nextCursor": None}
        bad = await gw.get("/audit", params={"cursor": "x"}, headers=auth("admin"))
        assert bad.status_code == 400
        # Another tenant's admin sees none of it.
        other = (await gw.get("/audit", headers=auth("carol"))).status_code
        assert other == 403  # carol is no admin; t2 has none here


async def test_a_scrub_records_the_runs_it_stopped(make_app: AppFactory) -> None:
    async with make_app(api_keys=KEYS) as gw:
        meta = {"echo": {"delayMs": 60000}}  # a run still under way when the scrub comes
        r = await post_message(
            gw, "x", headers=auth("alice"), metadata=meta, configuration={"blocking": False}
        )
        task = r.json()["task"]

        async def working() -> bool:
            got = await gw.get(f"/v1/tasks/{task['id']}", headers=auth("alice"))
            return bool(got.json()["status"]["state"] == "working")

        await until(working, what="the run to be working")
        cid = task["contextId"]
        assert (await gw.delete(f"/v1/contexts/{cid}", headers=auth("alice"))).status_code == 204
        (scrub,) = await _entries(gw, 1, operation="delete_context")
    assert scrub["removed"] == {
        "messages": 1,
        "tasks": 1,
        "vectors": scrub["removed"]["vectors"],  # 0 or 1: the embedding may not have run
        "pendingJobs": 1,
        "deadLetters": 0,
        "memoriesQueued": 0,
    }


async def test_every_binding_records_its_operation_and_ids(make_app: AppFactory) -> None:
    async with make_app(api_keys=KEYS) as gw:
        alice = auth("alice")
        message = {"role": "user", "messageId": "a1", "parts": [{"kind": "text", "text": SENTINEL}]}
        sent = await gw.post("/", json=rpc("message/send", {"message": message}), headers=alice)
        task = sent.json()["result"]
        batch = [
            rpc("tasks/get", {"id": task["id"]}, request_id=2),
            rpc(f"no/{SENTINEL}", request_id=3),
        ]
        assert (await gw.post("/", json=batch, headers=alice)).status_code == 200
        v1 = {"message": {"role": "ROLE_USER", "messageId": "a2", "parts": [{"text": "x"}]}}
        rest = (await gw.post("/a2a/message:send", json=v1, headers=alice)).json()["task"]
        entries = await _entries(gw, 3)
        by_op = {e["operation"]: e for e in entries}
        sent_entry = by_op["jsonrpc:message/send"]
        assert sent_entry["taskId"] == task["id"] and sent_entry["contextId"] == task["contextId"]
        both = by_op["jsonrpc:tasks/get,jsonrpc:unknown"]
        assert both["taskId"] == task["id"] and both["contextId"] == task["contextId"]
        proto = by_op["send_v1"]
        assert proto["taskId"] == rest["id"] and proto["contextId"] == rest["contextId"]
        page = await gw.get("/audit", headers=auth("admin"))
        assert SENTINEL not in page.text


async def test_strings_a_client_chose_are_kept_as_digests(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """Unknown ids and a client's own request id are the client's words: the trail keeps
    their digests, and the ids of what exists as they are."""
    chosen = "Jane-Doe-1970-04-02"
    async with make_app(api_keys=KEYS) as gw:
        alice = {**auth("alice"), "X-Request-Id": chosen}
        task = await send_task(gw, "x", headers=alice)
        missing = await gw.get(f"/v1/contexts/ctx-{chosen}", headers=alice)
        assert missing.status_code == 404 and missing.headers["x-request-id"] == chosen
        assert (await gw.get(f"/v1/tasks/task-{chosen}", headers=alice)).status_code == 404
        entries = await _entries(gw, 3, user="alice")
        by_op = {e["operation"]: e for e in entries}
        assert by_op["send_message"]["taskId"] == task["id"]
        assert by_op["send_message"]["contextId"] == task["contextId"]
        assert by_op["read_context"]["contextId"] == hashed_id(f"ctx-{chosen}")
        assert by_op["get_task"]["taskId"] == hashed_id(f"task-{chosen}")
        assert {e["requestId"] for e in entries} == {hashed_id(chosen)}
        page = await gw.get("/audit", headers=auth("admin"))
        assert chosen not in page.text
    assert chosen.encode() not in await _raw_streams(redis)


@slow_process_test
async def test_an_answered_request_is_in_the_trail_whatever_crashes_after(
    redis_url: str, redis: RawRedis, tmp_path: Path
) -> None:
    """A request is answered only once its audit entry is written: while Redis takes no
    writes (CLIENT PAUSE WRITE), an authenticated read is not answered 200 but, once the
    entry's write times out, 503 with Retry-After; the gateway killed then (SIGKILL), the
    trail holds every request that was answered 2xx."""
    env = {"REDIS_URL": redis_url, "GATEWAY_API_KEYS": KEYS, "GATEWAY_REDIS_TIMEOUT_SECONDS": "1"}
    answered: list[str] = []
    with serving(tmp_path, **env) as (process, base):
        async with httpx.AsyncClient(base_url=base, timeout=60) as gw:
            r = await post_message(gw, "vitals", headers=auth("alice"))
            assert r.status_code == 200, r.text
            task_id = r.json()["task"]["id"]
            answered.append("send_message")
            everywhere = {"target_nodes": redis.ALL_NODES} if CLUSTER else {}
            await redis.client_pause(120_000, all=False, **everywhere)  # writes wait, not reads
            try:
                r = await gw.get(f"/v1/tasks/{task_id}", headers=auth("alice"))
                assert r.status_code == 503, r.text  # not 200 with an entry only in memory
                assert r.headers["Retry-After"] == "1"
                # each binding says so in its own spelling: JSON-RPC, an error for the call
                call = {"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"id": task_id}}
                r = await gw.post("/", json=call, headers=auth("alice"))
                assert r.status_code == 200, r.text
                assert r.json()["id"] == 7 and r.json()["error"]["code"] == -32603, r.text
                assert "result" not in r.json()
                r = await gw.get(f"/a2a/tasks/{task_id}", headers=auth("alice"))
                assert r.status_code == 503, r.text
                assert r.json()["error"]["status"] == "UNAVAILABLE", r.text
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=PROCESS_SECONDS)
            finally:
                await redis.client_unpause(**everywhere)
    with serving(tmp_path, **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=60) as gw:
            operations = [e["operation"] for e in await _entries(gw, 1)]
    assert [op for op in operations if op in answered] == answered, operations
