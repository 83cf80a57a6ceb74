"""Encryption keys across processes: the store names the keys its data is sealed with, a
process whose keys disagree refuses to start, `rotate-data` refuses a key a live process
lacks, and a value that does not open is that value's error, not its context's."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from gateway.embedded_redis import free_port
from gateway.store.key_registry import ForeignKeyError
from gateway.store.keys import KEYRING, REPLICAS, UserKeys
from tests.at_rest_sentinel import NEW_ONLY, OLD_ONLY, indexed, sealed_with, send_sentinel
from tests.conftest import TEST_KEYRING, AppFactory, RawRedis, message
from tests.processes import PROCESS_SECONDS, environment, slow_process_test
from tests.waiting import until

ANOTHER = base64.b64encode(b"another-key-0-another-key-0-abcd").decode()
# The tests' ring with another key under the current key's id, or under the old key's.
FOREIGN = orjson.dumps(orjson.loads(TEST_KEYRING) | {"k0": ANOTHER}).decode()
FOREIGN_OLD = orjson.dumps(orjson.loads(TEST_KEYRING) | {"k9": ANOTHER}).decode()


async def gateway(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`gateway <args>`, which must end by itself (a refusal) within the bound."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "gateway.cli", *args],
        env=environment(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=PROCESS_SECONDS,
    )


@slow_process_test
async def test_a_process_with_another_key_under_a_used_id_refuses_to_start(
    make_app: AppFactory, redis: RawRedis, redis_url: str, tmp_path: Path
) -> None:
    async with make_app() as c:  # a replica with the right keys, serving
        task = await send_sentinel(c, "SENTINEL-right")
        wrong = {"REDIS_URL": redis_url, "GATEWAY_ENCRYPTION_KEYS": FOREIGN}
        port = str(free_port())
        for command in (("serve", "--port", port), ("worker",)):
            done = await gateway(tmp_path, *command, **wrong)
            assert done.returncode == 2, done.stderr[-2000:]
            (line,) = [x for x in done.stderr.splitlines() if "refusing to start" in x]
            assert "key id k0" in line and "another key" in line, line
            assert ANOTHER not in done.stderr
        # nothing was written with the foreign key; the right replica reads on
        assert await sealed_with(redis, task) == {"k0"}
        assert (await c.get(f"/v1/tasks/{task['id']}")).status_code == 200
    # in process too, before it takes any work
    with pytest.raises(ForeignKeyError):
        async with make_app(encryption_keys=FOREIGN):
            pass


async def test_a_process_lacking_a_key_the_data_is_sealed_with_refuses_to_start(
    make_app: AppFactory, redis: RawRedis
) -> None:
    async with make_app(encryption_keys=OLD_ONLY) as c:
        await send_sentinel(c, "SENTINEL-old")
        # what Redis holds of the keys: ids and keyed fingerprints, never a key
        named = [
            *(await redis.hgetall(KEYRING)).values(),
            *(await redis.hgetall(REPLICAS)).values(),
        ]
        k9 = orjson.loads(OLD_ONLY)["k9"]
        assert len(named) == 2 and not [v for v in named if k9.encode() in v]
        assert not [v for v in named if base64.b64decode(k9) in v]
    with pytest.raises(ForeignKeyError, match="k9"):
        async with make_app(encryption_keys=NEW_ONLY):
            pass
    with pytest.raises(ForeignKeyError, match="k9"):  # storing in clear needs it too
        async with make_app(encryption="off", encryption_keys=None):
            pass
    async with make_app(encryption_keys=TEST_KEYRING) as c:  # both: it starts
        assert (await c.get("/readyz")).status_code == 200


async def test_a_message_sealed_with_an_unknown_key_is_that_messages_error_only(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """A replica that wrote with another key (one started before the store named its keys)
    leaves values the others cannot open: each reads as a marked stand-in, the context and
    its other tasks read as ever, and the conversation goes on."""
    async with make_app(embedder="hashing") as c:
        first = await send_sentinel(c, "SENTINEL-first")
        cid = first["contextId"]
        await redis.delete(KEYRING)  # as before the store named its keys
        async with make_app(encryption_keys=FOREIGN, embedder="hashing") as foreign:
            body = {"message": message("SENTINEL-foreign note", contextId=cid)}
            r = await foreign.post("/v1/message:send", json=body)
            assert r.status_code == 200, r.text
            poisoned = r.json()["task"]
            await until(lambda: indexed(c, cid), what="the messages to be indexed")
        page = await c.get(f"/v1/contexts/{cid}")
        assert page.status_code == 200, page.text
        assert "SENTINEL-foreign" not in page.text and "SENTINEL-first" in page.text
        tasks = {t["id"]: t for t in page.json()["items"]}
        assert tasks[first["id"]]["status"]["state"] == "completed"
        stand_in = tasks[poisoned["id"]]
        # the foreign replica's status, or, when a replica with the right keys took its run
        # (the durable queue), the run's failure: it cannot read the message
        assert stand_in["status"]["state"] in ("unknown", "failed"), stand_in
        (unread,) = stand_in["history"][:1]
        assert unread["metadata"]["unreadable"] == {
            "error": "StoredDataUnreadableError",
            "code": -32030,
        }
        assert all(a["metadata"]["unreadable"] for a in stand_in.get("artifacts", [])), stand_in
        for path in (f"/v1/tasks/{poisoned['id']}", f"/a2a/tasks/{poisoned['id']}"):
            r = await c.get(path, params={"historyLength": 5})
            assert r.status_code == 200 and "SENTINEL-foreign" not in r.text, r.text
        rpc = {"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"id": poisoned["id"]}}
        r = await c.post("/", json=rpc)
        assert r.status_code == 200 and "SENTINEL-foreign" not in r.text, r.text
        assert r.json()["result"]["history"][0]["metadata"]["unreadable"], r.text
        # search finds what opens, and not the rest
        for mode in ("hybrid", "vector", "text"):
            query = {"query": "SENTINEL note vitals", "topK": 5, "mode": mode}
            r = await c.post(f"/v1/contexts/{cid}:search", json=query)
            assert r.status_code == 200 and "SENTINEL-foreign" not in r.text, r.text
        # the conversation goes on: the run's history leaves out what does not open
        body = {"message": message("and then?", contextId=cid)}
        r = await c.post("/v1/message:send", json=body)
        assert r.status_code == 200 and r.json()["task"]["status"]["state"] == "completed"
        assert "SENTINEL-foreign" not in r.text
        ck = UserKeys.of("default", "local").context(cid)
        assert await redis.hlen(ck.msgs) >= 5


async def test_rotate_data_refuses_a_key_a_live_process_lacks(
    make_app: AppFactory, redis: RawRedis, redis_url: str, tmp_path: Path
) -> None:
    env = {"REDIS_URL": redis_url, "GATEWAY_ENCRYPTION_KEYS": TEST_KEYRING}
    async with make_app(encryption_keys=OLD_ONLY) as c:  # live, k9 only
        old = await send_sentinel(c, "SENTINEL-old")
        done = await gateway(tmp_path, "encryption", "rotate-data", **env)
        assert done.returncode == 2, done.stderr[-2000:]
        (line,) = [x for x in done.stderr.splitlines() if "rotation refused" in x]
        assert "do not have key k0" in line, line
        assert await sealed_with(redis, old) == {"k9"}  # nothing re-sealed
    # a key under a used id that is another key is refused too, live processes or not
    foreign = {**env, "GATEWAY_ENCRYPTION_KEYS": FOREIGN_OLD}
    done = await gateway(tmp_path, "encryption", "rotate-data", **foreign)
    assert done.returncode == 2 and "key id k9" in done.stderr, done.stderr[-2000:]
    assert await sealed_with(redis, old) == {"k9"}
    # once the process without the key has gone, it runs, and retires the old key
    done = await gateway(tmp_path, "encryption", "rotate-data", **env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert await sealed_with(redis, old) == {"k0"}
    assert set(await redis.hkeys(KEYRING)) == {b"k0"}
    async with make_app(encryption_keys=NEW_ONLY) as c:
        assert (await c.get(f"/v1/tasks/{old['id']}")).status_code == 200
