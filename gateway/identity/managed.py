"""Verifying managed API keys, with a short cache so a request rarely reaches Redis.

A key's record is reused for ``cache_seconds`` (1 s by default) by each process, so a key
revoked anywhere is refused by every replica within that time; each refresh also records
the key's last use. Unknown ids are cached too, so random keys cannot bypass the cache.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from gateway.api_keys import KeyRecord, parse_key
from gateway.clock import now_ms
from gateway.errors import UnauthenticatedError
from gateway.principal import Principal
from gateway.store.apikeys_store import ApiKeyStore

__all__ = ["ManagedKeys"]

_CACHE_ENTRIES = 10_000


class ManagedKeys:
    def __init__(self, store: ApiKeyStore, secret: bytes, cache_seconds: float) -> None:
        self._store, self._secret, self._ttl = store, secret, cache_seconds
        self._cache: OrderedDict[str, tuple[KeyRecord | None, float]] = OrderedDict()

    @staticmethod
    def shaped(key: str) -> bool:
        return parse_key(key) is not None

    async def _record(self, key_id: str) -> KeyRecord | None:
        cached = self._cache.get(key_id)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self._ttl:
            return cached[0]
        record = await self._store.use(key_id)
        self._cache[key_id] = (record, now)
        self._cache.move_to_end(key_id)
        if len(self._cache) > _CACHE_ENTRIES:
            self._cache.popitem(last=False)
        return record

    async def principal(self, key: str) -> Principal:
        key_id = parse_key(key)
        record = await self._record(key_id) if key_id is not None else None
        if record is None or not record.matches(self._secret, key):
            raise UnauthenticatedError()
        now = now_ms()
        if record.revoked_ms and record.revoked_ms <= now:
            raise UnauthenticatedError("This API key has been revoked")
        if not record.usable(now):
            raise UnauthenticatedError("This API key has expired")
        return Principal(
            record.tenant, record.user, frozenset(record.roles), credential=f"key:{record.id}"
        )
