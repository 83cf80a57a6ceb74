"""PHI at rest, rotated: with two keys in the keyring, values sealed with the old one are
resealed with the new, event logs and the artifact being streamed included, from the app and
from the command line."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx

from gateway.store.keys import UserKeys
from gateway.store.rotation import Rotation
from gateway.store.sealing import Keyring, Sealer, key_id_of
from tests.at_rest_sentinel import NEW_ONLY, OLD_ONLY, indexed, sealed_with, send_sentinel
from tests.conftest import TEST_KEYRING, AppFactory, RawRedis, message
from tests.processes import ROOT, environment
from tests.sse import collect, events, served_gateway
from tests.waiting import until


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
