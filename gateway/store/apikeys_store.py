"""Managed API keys in Redis (their records, never the keys).

``gw:{apikeys}:k:<id>`` (hash) holds a key's record; ``gw:{apikeys}:ids`` (zset, id ->
creation ms) lists every key, ``gw:{apikeys}:t:<tenant digest>`` a tenant's. One hash
tag: a key and its indexes change together.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from gateway.api_keys import KeyRecord
from gateway.store.assembly import now_ms
from gateway.store.scripts import Scripts, UseApiKeyArgs, argv
from gateway.store.translate import translated

__all__ = ["ApiKeyStore"]

_ALL = "gw:{apikeys}:ids"


def _record_key(key_id: str) -> str:
    return f"gw:{{apikeys}}:k:{key_id}"


def _tenant_index(tenant: str) -> str:
    digest = hashlib.blake2b(tenant.encode(), digest_size=12).hexdigest()
    return f"gw:{{apikeys}}:t:{digest}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _record(key_id: str, raw: dict[Any, Any] | list[Any]) -> KeyRecord | None:
    if isinstance(raw, list):  # HGETALL from a script: a flat list
        raw = {raw[i]: raw[i + 1] for i in range(0, len(raw), 2)}
    fields = {_text(k): _text(v) for k, v in raw.items()}
    if "mac" not in fields:
        return None
    return KeyRecord(
        id=key_id,
        tenant=fields["tenant"],
        user=fields["user"],
        mac=fields["mac"],
        roles=tuple(orjson.loads(fields.get("roles", "[]"))),
        name=fields.get("name", ""),
        created_ms=int(fields.get("created", 0)),
        expires_ms=int(fields.get("expires", 0)),
        revoked_ms=int(fields.get("revoked", 0)),
        last_used_ms=int(fields.get("last_used", 0)),
        replaced_by=fields.get("replaced_by", ""),
        origin=fields.get("origin", ""),
    )


class ApiKeyStore:
    def __init__(self, client: Any, scripts: Scripts) -> None:
        self.client = client
        self._use = scripts.use_api_key

    @translated
    async def add(self, record: KeyRecord) -> None:
        fields = {
            "tenant": record.tenant,
            "user": record.user,
            "mac": record.mac,
            "roles": orjson.dumps(list(record.roles)),
            "name": record.name,
            "created": record.created_ms,
            "expires": record.expires_ms,
            "origin": record.origin,
        }
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(_record_key(record.id), mapping=fields)
            pipe.zadd(_ALL, {record.id: record.created_ms})
            pipe.zadd(_tenant_index(record.tenant), {record.id: record.created_ms})
            await pipe.execute()

    @translated
    async def get(self, key_id: str) -> KeyRecord | None:
        return _record(key_id, await self.client.hgetall(_record_key(key_id)))

    @translated
    async def use(self, key_id: str) -> KeyRecord | None:
        """The record, its last use set to now (one script call; nothing for no record)."""
        raw = await self._use(keys=[_record_key(key_id)], args=argv(UseApiKeyArgs(now_ms())))
        return _record(key_id, raw) if raw else None

    @translated
    async def list(self, tenant: str | None) -> list[KeyRecord]:
        index = _ALL if tenant is None else _tenant_index(tenant)
        ids = [_text(i) for i in await self.client.zrange(index, 0, -1)]
        async with self.client.pipeline(transaction=False) as pipe:
            for key_id in ids:
                pipe.hgetall(_record_key(key_id))
            raws = await pipe.execute()
        records = [_record(i, raw) for i, raw in zip(ids, raws, strict=True)]
        return [r for r in records if r is not None]

    @translated
    async def end(self, key_id: str, *, revoked_ms: int = 0, expires_ms: int = 0,
                  replaced_by: str = "") -> None:  # fmt: skip
        """Revoke a key now (``revoked_ms``) or let it expire (``expires_ms``, a rotation's
        grace), naming the key that replaced it."""
        fields: dict[str, Any] = {}
        if revoked_ms:
            fields["revoked"] = revoked_ms
        if expires_ms:
            fields["expires"] = expires_ms
        if replaced_by:
            fields["replaced_by"] = replaced_by
        if fields:
            await self.client.hset(_record_key(key_id), mapping=fields)
