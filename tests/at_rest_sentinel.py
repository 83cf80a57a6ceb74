"""The sentinel the PHI-at-rest tests send, in text, a DataPart, a file name and metadata,
and where they look for it: the files under a data directory, every Redis value, and the
keys a sealed value names; and the keyrings of the old key only or the new key only."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.store.keys import UserKeys
from gateway.store.sealing import key_id_of
from tests.conftest import TEST_KEYRING, RawRedis, message

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
