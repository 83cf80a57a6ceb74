"""PHI at rest: what a copy of the Redis files, or of its values, reveals of patient data.

A sentinel string sent in text, a DataPart, a file name and metadata is looked for in every
file under the data directory and, with encryption, in every Redis value: content and
registered agents are sealed, a value moved to another user or context does not open, and a
scrub leaves no trace on disk."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import httpx
import orjson

from gateway.store.keys import TenantAgentKeys, UserKeys
from gateway.store.rotation import Rotation
from gateway.store.sealing import Keyring, Sealer, key_id_of
from tests.at_rest_sentinel import (
    NEW_ONLY,
    OLD_ONLY,
    every_value,
    files_holding,
    holding,
    sentinel_message,
)
from tests.conftest import API_KEYS, TEST_KEYRING, AppFactory, RawRedis, auth, message
from tests.processes import serving, slow_process_test
from tests.waiting import until


@slow_process_test
async def test_a_scrub_leaves_no_trace_on_disk_within_the_bound(tmp_path: Path) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    data = tmp_path / ".data"
    env = {"GATEWAY_SCRUB_REWRITE_SECONDS": "1", "GATEWAY_ENCRYPTION": "off"}
    with serving(tmp_path, **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            body = {"message": sentinel_message(sentinel)}
            r = await c.post("/v1/message:send", json=body)
            assert r.status_code == 200, r.text
            context_id = r.json()["task"]["contextId"]
            # Unencrypted, the text reaches the append-only file (fsync every second)
            await until(
                lambda: files_holding(data, sentinel), what="the sentinel on disk", logs=tmp_path
            )
            assert (await c.delete(f"/v1/contexts/{context_id}")).status_code == 204
            await until(
                lambda: not files_holding(data, sentinel),
                what="the scrubbed sentinel to leave every file of the data directory",
                logs=tmp_path,
            )


async def test_content_is_sealed_in_every_redis_value(
    make_app: AppFactory, redis: RawRedis
) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    async with make_app(embedder="hashing") as c:
        body = {"message": sentinel_message(sentinel), "metadata": {"ward": sentinel}}
        first = await c.post("/v1/message:send", json=body)
        assert first.status_code == 200, first.text
        task = first.json()["task"]
        again = sentinel_message(sentinel, contextId=task["contextId"])
        assert (await c.post("/v1/message:send", json={"message": again})).status_code == 200
        # everything reads back in clear, through the API
        read = (await c.get(f"/v1/tasks/{task['id']}", params={"historyLength": 10})).json()
        assert sentinel in orjson.dumps(read).decode()
        assert read["metadata"]["ward"] == sentinel  # the task's metadata
        assert read["history"][0]["metadata"]["ward"] == sentinel  # the message's
        assert read["artifacts"][0]["parts"][0]["text"].endswith(sentinel)
        page = (await c.get(f"/v1/contexts/{task['contextId']}")).json()
        assert sentinel in orjson.dumps(page).decode()
        found = (
            await c.post(
                f"/v1/contexts/{task['contextId']}:search", json={"query": "vitals", "topK": 1}
            )
        ).json()
        assert found is not None
        # over an A2A 1.0 binding too (parts without kind, a file by its bytes)
        v1 = {
            "role": "ROLE_USER",
            "messageId": f"v1-{uuid.uuid4().hex}",
            "parts": [
                {"text": f"Latest vitals attached. {sentinel}"},
                {"data": {"note": sentinel}},
                {"raw": base64.b64encode(b"%PDF-1.4").decode(), "filename": f"{sentinel}.pdf"},
            ],
            "metadata": {"ward": sentinel},
        }
        sent = await c.post("/a2a/message:send", json={"message": v1})
        assert sent.status_code == 200, sent.text
        read_v1 = await c.get(f"/a2a/tasks/{sent.json()['task']['id']}?historyLength=5")
        assert read_v1.status_code == 200 and f"{sentinel}.pdf" in read_v1.text, read_v1.text
        listed = await c.get("/a2a/tasks", params={"includeArtifacts": "true"})
        assert listed.status_code == 200 and sentinel in listed.text, listed.text
        values = await every_value(redis)
    assert values and holding(values, task["contextId"])  # the scan sees the context
    assert holding(values, sentinel) == []
    assert holding(values, "Latest vitals") == []


async def test_a_value_moved_to_another_user_or_context_does_not_open(
    make_app: AppFactory, redis: RawRedis
) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    async with make_app(api_keys=orjson.dumps(API_KEYS).decode()) as c:
        alice, other = [
            (
                await c.post(
                    "/v1/message:send",
                    json={"message": sentinel_message(sentinel)},
                    headers=auth("alice"),
                )
            ).json()
            for _ in range(2)
        ]
        bob = (
            await c.post("/v1/message:send", json={"message": message("mine")}, headers=auth("bob"))
        ).json()
        a_task, b_task, o_task = alice["task"], bob["task"], other["task"]
        a_keys = UserKeys.of("t1", "alice").context(a_task["contextId"])
        b_keys = UserKeys.of("t1", "bob").context(b_task["contextId"])
        o_keys = UserKeys.of("t1", "alice").context(o_task["contextId"])
        stolen = await redis.hget(a_keys.msgs, "1")
        status = await redis.hget(a_keys.tasks, f"{a_task['id']}:s")
        assert stolen is not None and status is not None
        # copied into bob's context: the message, and the status under bob's task
        await redis.hset(b_keys.msgs, "1", stolen)
        await redis.hset(b_keys.tasks, f"{b_task['id']}:s", status)
        # and into another context of alice's own
        await redis.hset(o_keys.msgs, "1", stolen)
        # each value that does not open reads as its stand-in, marked, with no content
        for key, task_id in (("bob", b_task["id"]), ("alice", o_task["id"])):
            r = await c.get(f"/v1/tasks/{task_id}", params={"historyLength": 5}, headers=auth(key))
            assert r.status_code == 200, r.text
            assert key == "alice" or (sentinel not in r.text and "vitals" not in r.text)
            first = r.json()["history"][0]
            assert first["messageId"] == "unreadable-1" and first["role"] == "agent", first
            assert first["metadata"]["unreadable"]["code"] == -32030, first
        status = r.json()["status"]  # in alice's other context, her own status still opens
        assert status["state"] == "completed", status
        r = await c.get(f"/v1/tasks/{b_task['id']}", headers=auth("bob"))
        assert r.json()["status"]["state"] == "unknown", r.text
        assert r.json()["status"]["message"]["metadata"]["unreadable"], r.text
        # over JSON-RPC (0.3 and 1.0) too
        for method in ("tasks/get", "GetTask"):
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": b_task["id"]}}
            r = await c.post("/", json=body, headers=auth("bob"))
            assert r.status_code == 200 and "result" in r.json(), r.text
            assert sentinel not in r.text and "vitals" not in r.text
            assert "StoredDataUnreadableError" in r.text, r.text
        # the owner still reads hers
        mine = await c.get(f"/v1/tasks/{a_task['id']}", headers=auth("alice"))
        assert mine.status_code == 200 and sentinel in mine.text


async def test_registered_agents_are_sealed_too(make_app: AppFactory, redis: RawRedis) -> None:
    """An agent's entry may hold its API key and prompt: sealed, bound to its tenant and id."""
    sentinel, secret = f"SENTINEL-{uuid.uuid4().hex}", f"sk-{uuid.uuid4().hex}"
    spec = {
        "id": "summariser",
        "name": "Summariser",
        "description": f"Summarises a stay. {sentinel}",
        "systemPrompt": f"You write discharge letters. {sentinel}",
        "type": "openai",
        "config": {"baseUrl": "http://127.0.0.1:9/v1", "model": "m", "apiKey": secret},
    }
    options = {"api_keys": orjson.dumps(API_KEYS).decode(), "outbound_allowlist": "127.0.0.1:*"}
    async with make_app(encryption_keys=OLD_ONLY, **options) as c:
        r = await c.post("/agents", json=spec, headers=auth("admin"))
        assert r.status_code == 201, r.text
        r = await c.patch("/agents/summariser", json={"name": "S2"}, headers=auth("admin"))
        assert r.status_code == 200 and r.json()["revision"] == 2, r.text
        values = await every_value(redis)
        assert holding(values, "summariser") and holding(values, sentinel) == []
        assert holding(values, secret) == []
    # rotated to the current key, the entry still reads once the old key is gone
    figures = await Rotation(redis, Sealer(Keyring.parse(TEST_KEYRING))).run()
    assert figures.resealed == 1 and figures.unreadable == 0, figures
    mine = TenantAgentKeys.of("t1").agent("summariser")
    assert key_id_of(await redis.get(mine) or b"") == "k0"
    async with make_app(encryption_keys=NEW_ONLY, **options) as c:
        r = await c.get("/agents/summariser", headers=auth("alice"))
        assert r.status_code == 200 and r.json()["description"].endswith(sentinel), r.text
        # the entry copied under another tenant's keys does not open there
        theirs = TenantAgentKeys.of("t2")
        await redis.set(theirs.agent("summariser"), await redis.get(mine) or b"")
        await redis.sadd(theirs.index, theirs.agent("summariser"))
        r = await c.get("/agents/summariser", headers=auth("carol"))
        assert r.status_code == 500 and r.json()["error"] == "StoredDataUnreadableError"
        assert sentinel not in r.text
