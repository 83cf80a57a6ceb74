"""The agent registry in Redis, per tenant (see ``keys.TenantAgentKeys``)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from gateway.store.keys import TenantAgentKeys
from gateway.store.records import text_of as _text
from gateway.store.translate import translated

__all__ = ["AgentStore"]

# KEYS: 1 index 2 entry. ARGV: 1 entry json 2 ttl ms or '0' (permanent).
_CREATE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if ARGV[2] ~= '0' then redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
else redis.call('SET', KEYS[2], ARGV[1]) end
redis.call('SADD', KEYS[1], KEYS[2])
return 1
"""

# KEYS: 1 entry. ARGV: 1 ttl ms. Reads an entry; an ephemeral one's TTL slides.
_READ = """
local entry = redis.call('GET', KEYS[1])
if entry and redis.call('PTTL', KEYS[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return entry
"""

# KEYS: 1 entry. ARGV: 1 expected revision 2 new json 3 ttl ms. Replaces the entry if its
# revision is still the one read (else 'conflict'); keeps it ephemeral if it was.
_REPLACE = """
local entry = redis.call('GET', KEYS[1])
if not entry then return 'gone' end
if cjson.decode(entry)['revision'] ~= tonumber(ARGV[1]) then return 'conflict' end
if redis.call('PTTL', KEYS[1]) > 0 then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
else redis.call('SET', KEYS[1], ARGV[2]) end
return 'ok'
"""


class AgentStore:
    def __init__(self, client: Any, ttl_seconds: int) -> None:
        self.client: Redis = client
        self.ttl_ms = ttl_seconds * 1000
        self._create = client.register_script(_CREATE)
        self._read = client.register_script(_READ)
        self._replace = client.register_script(_REPLACE)

    @translated
    async def create(self, tenant: str, agent_id: str, entry: bytes, ephemeral: bool) -> bool:
        keys = TenantAgentKeys.of(tenant)
        ttl = self.ttl_ms if ephemeral else 0
        done = await self._create(keys=[keys.index, keys.agent(agent_id)], args=[entry, ttl])
        return bool(done)

    @translated
    async def read(self, tenant: str, agent_id: str) -> bytes | None:
        raw = await self._read(
            keys=[TenantAgentKeys.of(tenant).agent(agent_id)], args=[self.ttl_ms]
        )
        return raw if raw is None else bytes(raw)

    @translated
    async def replace(self, tenant: str, agent_id: str, revision: int, entry: bytes) -> str:
        key = TenantAgentKeys.of(tenant).agent(agent_id)
        return _text(await self._replace(keys=[key], args=[revision, entry, self.ttl_ms]))

    @translated
    async def delete(self, tenant: str, agent_id: str) -> bool:
        keys = TenantAgentKeys.of(tenant)
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(keys.agent(agent_id))
            pipe.srem(keys.index, keys.agent(agent_id))
            deleted, _ = await pipe.execute()
        return bool(deleted)

    @translated
    async def all(self, tenant: str) -> list[bytes]:
        """Every entry of the tenant (index entries of expired agents are dropped)."""
        keys = TenantAgentKeys.of(tenant)
        members = sorted(_text(m) for m in await self.client.smembers(keys.index))
        if not members:
            return []
        values = await self.client.mget(members)
        gone = [m for m, v in zip(members, values, strict=True) if v is None]
        if gone:
            await self.client.srem(keys.index, *gone)
        return [v if isinstance(v, bytes) else v.encode() for v in values if v is not None]
