"""Managed API keys in Redis (their records, never the keys).

A key's record is a hash; one index lists every key, another each tenant's (zsets, id ->
creation ms), all under one hash tag so a key and its indexes change together (the keys are
spelled in ``keys.py``).
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.api_keys import KeyRecord
from gateway.clock import now_ms
from gateway.store.keys import API_KEYS, api_key, tenant_api_keys
from gateway.store.lua import Scripts
from gateway.store.lua.limits import UseApiKeyArgs
from gateway.store.translate import translated

__all__ = ["ApiKeyStore"]


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
            pipe.hset(api_key(record.id), mapping=fields)
            pipe.zadd(API_KEYS, {record.id: record.created_ms})
            pipe.zadd(tenant_api_keys(record.tenant), {record.id: record.created_ms})
            await pipe.execute()

    @translated
    async def get(self, key_id: str) -> KeyRecord | None:
        return _record(key_id, await self.client.hgetall(api_key(key_id)))

    @translated
    async def use(self, key_id: str) -> KeyRecord | None:
        """The record, its last use set to now (one script call; nothing for no record)."""
        raw = await self._use(keys=[api_key(key_id)], args=UseApiKeyArgs(now_ms()).argv())
        return _record(key_id, raw) if raw else None

    @translated
    async def list(self, tenant: str | None) -> list[KeyRecord]:
        index = API_KEYS if tenant is None else tenant_api_keys(tenant)
        ids = [_text(i) for i in await self.client.zrange(index, 0, -1)]
        async with self.client.pipeline(transaction=False) as pipe:
            for key_id in ids:
                pipe.hgetall(api_key(key_id))
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
            await self.client.hset(api_key(key_id), mapping=fields)
