"""PHI at rest: what a copy of the Redis files, or of its values, reveals of patient data.

A sentinel string sent in text, a DataPart, a file name and metadata is looked for in every
file under the data directory and, with encryption, in every Redis value.
"""

from __future__ import annotations

import asyncio
import base64
import stat
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.store.keys import TenantAgentKeys, UserKeys
from gateway.store.rotation import Rotation
from gateway.store.sealing import Keyring, Sealer, key_id_of
from tests.conftest import API_KEYS, TEST_KEYRING, AppFactory, RawRedis, auth, message
from tests.processes import ROOT, environment, serving, slow_process_test
from tests.sse import collect, events, served_gateway
from tests.waiting import until

OLD_ONLY = orjson.dumps({"k9": orjson.loads(TEST_KEYRING)["k9"]}).decode()
NEW_ONLY = orjson.dumps({"k0": orjson.loads(TEST_KEYRING)["k0"]}).decode()


def sentinel_message(sentinel: str, **fields: Any) -> dict[str, Any]:
    """A message carrying ``sentinel`` in every place content can hide."""
    return message(
        f"Latest vitals attached. {sentinel}",
        {"kind": "data", "data": {"note": sentinel, "vitals": {"bp": "120/80"}}},
        {
            "kind": "file",
            "file": {
                "name": f"{sentinel}.pdf",
                "mimeType": "application/pdf",
                "bytes": base64.b64encode(b"%PDF-1.4").decode(),
            },
        },
        metadata={"ward": sentinel},
        **fields,
    )


def files_holding(root: Path, needle: str) -> list[str]:
    """The files under ``root`` whose bytes hold ``needle``."""
    found = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and needle.encode() in path.read_bytes():
                found.append(str(path.relative_to(root)))
        except OSError:
            continue  # a file replaced while it was read (a rewrite's temporary file)
    return found


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


async def every_value(redis: RawRedis) -> list[bytes]:
    """Every key's serialized value (DUMP) and its readable form, all of Redis."""
    out: list[bytes] = []
    async for key in redis.scan_iter(count=1000):
        dumped = await redis.dump(key)
        if dumped is not None:
            out.append(dumped)
        kind = (await redis.type(key)).decode()
        if kind == "hash":
            out += [k + b"=" + v for k, v in (await redis.hgetall(key)).items()]
        elif kind == "string":
            out.append(await redis.get(key) or b"")
        elif kind == "list":
            out += await redis.lrange(key, 0, -1)
        elif kind == "set":
            out += list(await redis.smembers(key))
        elif kind == "zset":
            out += await redis.zrange(key, 0, -1)
        elif kind == "stream":
            for _, fields in await redis.xrange(key):
                out += [k + b"=" + v for k, v in fields.items()]
    return out


def holding(values: list[bytes], needle: str) -> list[bytes]:
    return [v[:80] for v in values if needle.encode() in v]


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


async def test_rotation_with_two_keys(
    make_app: AppFactory, redis: RawRedis, redis_url: str
) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    # written under the old key alone, its context memory too
    async with make_app(encryption_keys=OLD_ONLY) as c:
        old = await send_sentinel(c, sentinel)
        await until(lambda: indexed(c, old["contextId"]), what="the message to be indexed")
    # the new key first, the old one still configured: old values read, new writes use k0
    async with make_app(encryption_keys=TEST_KEYRING) as c:
        assert sentinel in (await c.get(f"/v1/tasks/{old['id']}")).text
        new = await send_sentinel(c, sentinel)
        assert await sealed_with(redis, new) == {"k0"}
        assert await sealed_with(redis, old) == {"k9"}
        # an interrupted rotation resumes: one batch of one key, then the rest
        sealer = Sealer(Keyring.parse(TEST_KEYRING))
        first = Rotation(redis, sealer, batch=1)
        figures = await first.run()
        assert figures.resealed >= 4, figures  # message, reply, status, artifacts, metadata
        assert await sealed_with(redis, old) == {"k0"}
        again = await Rotation(redis, sealer).run()
        assert again.resealed == 0, again  # nothing left under the old key
    # with the old key gone, everything still reads, and searches
    async with make_app(encryption_keys=NEW_ONLY) as c:
        for task in (old, new):
            r = await c.get(f"/v1/tasks/{task['id']}", params={"historyLength": 5})
            assert r.status_code == 200 and sentinel in r.text, r.text
        body = {"query": "vitals", "topK": 1}
        r = await c.post(f"/v1/contexts/{old['contextId']}:search", json=body)
        assert r.status_code == 200 and sentinel in r.text, r.text


async def test_rotation_reseals_event_logs_and_the_artifact_being_streamed(
    redis: RawRedis, redis_url: str
) -> None:
    text = f"SENTINEL-{uuid.uuid4().hex} stable; continue current plan."
    body = {"message": message(text, metadata={"echo": {"chunks": 3, "delayMs": 3000}})}
    sealer = Sealer(Keyring.parse(TEST_KEYRING))
    async with (
        served_gateway(redis_url, encryption_keys=OLD_ONLY) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as c,
        c.stream("POST", "/v1/message:stream", json=body) as r,
    ):
        stream, first = events(r), []
        async for event in stream:  # mid-stream: two of three chunks in, the artifact open
            first += [event] if event.comment is None else []
            if sum(e.data.get("kind") == "artifact-update" for e in first) == 2:
                break
        task = first[0].data
        assert await log_sealed_with(redis, task) == {"k9"}
        figures = await Rotation(redis, sealer).run()
        assert figures.logs == 1 and figures.unreadable == 0, figures
        assert await log_sealed_with(redis, task) == {"k0"}
        rest = [e async for e in stream if e.comment is None]
    assert rest[-1].data["status"]["state"] == "completed"
    await Rotation(redis, sealer).run()  # what this k9-only gateway wrote since
    # The old key retired: the log still reads, from any point (Last-Event-ID).
    async with (
        served_gateway(redis_url, encryption_keys=NEW_ONLY) as base,
        httpx.AsyncClient(base_url=base, timeout=60) as c,
    ):
        resume = {"Last-Event-ID": first[0].id or ""}
        async with c.stream("GET", f"/v1/tasks/{task['id']}:subscribe", headers=resume) as r:
            replay = await collect(r)
    assert [e.id for e in replay] == [e.id for e in first[1:] + rest]
    chunks = [e.data["artifact"] for e in replay if "artifact" in e.data]
    assert "".join(a["parts"][0]["text"] for a in chunks if a["name"] == "echo-stream") == text


async def log_sealed_with(redis: RawRedis, task: dict[str, Any]) -> set[str | None]:
    """The key ids of a task's event log entries and of its artifact being streamed."""
    keys = UserKeys.of("default", "local")
    ck = keys.context(task["contextId"])
    log = await redis.xrange(f"{keys.meta(task['contextId'])}:ev:{task['id']}")
    ids = {key_id_of(fields[b"d"]) for _, fields in log}
    streamed = await redis.hget(ck.tasks, f"{task['id']}:pa")
    return ids | ({key_id_of(streamed)} if streamed is not None else set())


async def indexed(c: httpx.AsyncClient, context_id: str) -> bool:
    memory = (await c.get(f"/v1/contexts/{context_id}")).json()["memory"]
    return bool(memory["pending"] == 0 and memory["indexed"] > 0)


async def send_sentinel(c: httpx.AsyncClient, sentinel: str) -> dict[str, Any]:
    body = {"message": sentinel_message(sentinel), "metadata": {"ward": sentinel}}
    r = await c.post("/v1/message:send", json=body)
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()["task"]
    return task


async def sealed_with(redis: RawRedis, task: dict[str, Any]) -> set[str | None]:
    """The key ids of a task's content values (its context's messages and its fields)."""
    ck = UserKeys.of("default", "local").context(task["contextId"])
    ids = {key_id_of(v) for v in (await redis.hgetall(ck.msgs)).values()}
    for field, value in (await redis.hgetall(ck.tasks)).items():
        if field.decode().endswith((":s", ":md")):
            ids.add(key_id_of(value))
        if field.decode().endswith(":a"):
            ids |= {key_id_of(t) for t in value[1:-1].split(b",")}
    return ids


async def test_rotate_data_from_the_command_line(
    make_app: AppFactory, redis: RawRedis, redis_url: str
) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    async with make_app(encryption_keys=OLD_ONLY) as c:
        old = await send_sentinel(c, sentinel)
    env = environment(Path("/nonexistent"), REDIS_URL=redis_url)
    env["GATEWAY_ENCRYPTION_KEYS"] = TEST_KEYRING
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "gateway.cli", "encryption", "rotate-data"],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '"event":"rotation done"' in done.stderr, done.stderr
    assert sentinel not in done.stderr
    assert await sealed_with(redis, old) == {"k0"}


async def test_encryption_off_stores_clear_and_still_reads_sealed_values(
    make_app: AppFactory, redis: RawRedis
) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    async with make_app() as c:
        sealed = await send_sentinel(c, sentinel)
    async with make_app(encryption="off") as c:
        clear = await send_sentinel(c, sentinel)
        assert sentinel in (await c.get(f"/v1/tasks/{sealed['id']}")).text
    assert await sealed_with(redis, clear) == {None}
    values = await every_value(redis)
    assert holding(values, sentinel)  # clear, as configured


def test_encryption_needs_keys_with_an_external_redis(tmp_path: Path, redis_url: str) -> None:
    env = environment(tmp_path, REDIS_URL=redis_url, GATEWAY_ENCRYPTION="on")
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "GATEWAY_ENCRYPTION_KEYS is required" in done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve"],
        env={**env, "GATEWAY_ENCRYPTION_KEYS": '{"k1": "c2hvcnQ="}'},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "GATEWAY_ENCRYPTION_KEYS" in bad.stderr and "32 bytes" in bad.stderr
    assert "c2hvcnQ" not in bad.stderr


@slow_process_test
async def test_the_embedded_gateway_seals_with_a_generated_key(tmp_path: Path) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    data = tmp_path / ".data"
    with serving(tmp_path) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            task = await send_sentinel(c, sentinel)
            assert sentinel in (await c.get(f"/v1/tasks/{task['id']}")).text
            # the context id (clear) reaches the append-only file; the sentinel does not
            await until(
                lambda: files_holding(data / "redis", task["contextId"]),
                what="the context's writes on disk",
                logs=tmp_path,
            )
            assert files_holding(data, sentinel) == []
    keyring = data / "encryption-keys.json"
    assert stat.S_IMODE(keyring.stat().st_mode) == 0o600
    Keyring.parse(str(keyring))  # a valid keyring, outside the Redis directory
    assert [p.name for p in data.rglob("encryption-keys.json")] == ["encryption-keys.json"]


async def test_context_memory_searches_sealed_vectors(
    make_app: AppFactory, redis: RawRedis
) -> None:
    async with make_app(embedder="hashing") as c, make_app(embedder="hashing") as early:
        first = await send_sentinel(c, "SENTINEL-first")
        cid = first["contextId"]
        texts = [f"Blood glucose reading number {i} was fine" for i in range(17)]
        for n, text in enumerate([*texts, "Allergic to penicillin since childhood"], start=2):
            await send_and_index(c, cid, text, n)  # one at a time: a frame each
            if n in (4, 6):  # a process that holds the frames of its searches, read on from there
                found = await search(early, cid, "glucose reading number 1", "vector")
                assert found[0]["text"].startswith("Blood glucose reading number")
        ck = UserKeys.of("default", "local").context(cid)
        stored = await redis.get(ck.vectors)
        assert stored is not None and stored[4:7] == b"\x00g1"  # a length, then a sealed frame
        frames_before = stored.count(b"\x00g1\x02k0")
        penicillin = "Allergic to penicillin since childhood"
        assert (await search(c, cid, "penicillin allergy"))[0]["text"] == penicillin
        assert frames_before > 16
        # the search merged the frames into one, which the next search opens
        assert (await redis.get(ck.vectors) or b"").count(b"\x00g1\x02k0") == 1
        assert (await search(c, cid, "penicillin allergy", "vector"))[0]["text"] == penicillin
        # the other process held the frames before the merge: it reads the merged one whole
        assert (await search(early, cid, "penicillin allergy", "vector"))[0]["text"] == penicillin
        # a frame added after the merge is read on from the merged one, in both processes
        await send_and_index(c, cid, "Ankle sprain from a fall on the stairs", 20)
        for process in (c, early):
            found = await search(process, cid, "sprained ankle after falling", "vector")
            assert found[0]["text"] == "Ankle sprain from a fall on the stairs"
        # sealed vectors moved into another context do not open there: they match nothing
        other = (await send_sentinel(c, "SENTINEL-other"))["contextId"]
        await redis.set(UserKeys.of("default", "local").context(other).vectors, stored)
        meta = {"vfmt": "s", "vdim": "256", "vmodel": "hashing:256"}
        await redis.hset(UserKeys.of("default", "local").context(other).meta, mapping=meta)
        r = await c.post(f"/v1/contexts/{other}:search", json={"query": "penicillin"})
        assert r.status_code == 200 and "Allergic" not in r.text, r.text


async def test_vectors_indexed_in_clear_keep_working_until_rotation_seals_them(
    make_app: AppFactory, redis: RawRedis
) -> None:
    async with make_app(embedder="hashing", encryption="off") as c:
        cid = (await send_sentinel(c, "SENTINEL-clear"))["contextId"]
        await send_and_index(c, cid, "Chest pain radiating to the left arm", 2)
    ck = UserKeys.of("default", "local").context(cid)
    assert len(await redis.get(ck.vectors) or b"") == 2 * 256 * 4  # clear rows
    async with make_app(embedder="hashing") as c:
        assert (await search(c, cid, "chest pain", "vector"))[0]["text"].startswith("Chest")
        # encryption on: this context's vectors stay in clear, one layout per context
        await send_and_index(c, cid, "Allergic to penicillin since childhood", 3)
        assert len(await redis.get(ck.vectors) or b"") == 3 * 256 * 4
        assert (await search(c, cid, "penicillin allergy"))[0]["text"].startswith("Allergic")
        # rotation seals them as one frame; the process holding the clear rows reads it whole
        figures = await Rotation(redis, Sealer(Keyring.parse(TEST_KEYRING))).run()
        assert figures.resealed >= 1 and figures.unreadable == 0, figures
        sealed = await redis.get(ck.vectors) or b""
        assert sealed[4:10] == b"\x00g1\x02k0" and await redis.hget(ck.meta, "vfmt") == b"s"
        assert (await search(c, cid, "penicillin allergy", "vector"))[0]["text"].startswith(
            "Allergic"
        )
        # new vectors are sealed frames after it, read on from there
        await send_and_index(c, cid, "Ankle sprain from a fall on the stairs", 4)
        assert (await redis.get(ck.vectors) or b"").count(b"\x00g1\x02k0") == 2
        found = await search(c, cid, "sprained ankle after falling", "vector")
        assert found[0]["text"] == "Ankle sprain from a fall on the stairs"


async def send_and_index(c: httpx.AsyncClient, cid: str, text: str, count: int) -> None:
    """Send ``text`` to the context and wait until its ``count`` messages are indexed."""
    r = await c.post("/v1/message:send", json={"message": message(text, contextId=cid)})
    assert r.status_code == 200, r.text

    async def indexed() -> bool:
        memory = (await c.get(f"/v1/contexts/{cid}")).json()["memory"]
        return bool(memory["pending"] == 0 and memory["indexed"] == count)

    await until(indexed, what="the message to be indexed")


async def search(
    c: httpx.AsyncClient, cid: str, query: str, mode: str = "hybrid"
) -> list[dict[str, Any]]:
    body = {"query": query, "topK": 1, "mode": mode}
    r = await c.post(f"/v1/contexts/{cid}:search", json=body)
    assert r.status_code == 200 and r.json()["mode"] == mode, r.text
    hits: list[dict[str, Any]] = r.json()["hits"]
    return hits


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
