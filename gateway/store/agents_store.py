"""The agent registry in Redis, per tenant (see ``keys.TenantAgentKeys``).

Entries may hold agents' API keys and prompts: with encryption on they are sealed like
content (``sealing.py``), bound to their own key (tenant digest and agent id), so an entry
copied to another tenant's or agent's key does not open.
"""

from __future__ import annotations

from typing import Any

import orjson
from redis.asyncio import Redis

from gateway.store.assembly import text_of as _text
from gateway.store.keys import TenantAgentKeys
from gateway.store.lua import Scripts
from gateway.store.lua.registry import CreateAgentArgs, ReadAgentArgs, ReplaceAgentArgs
from gateway.store.sealing import Sealer
from gateway.store.translate import translated

__all__ = ["AgentStore", "entry_aad"]


class AgentStore:
    def __init__(self, client: Any, ttl_seconds: int, sealer: Sealer | None = None) -> None:
        self.client: Redis = client
        self.ttl_ms = ttl_seconds * 1000
        self.sealer = sealer or Sealer(None)
        self._scripts = Scripts.register(client)

    @translated
    async def create(self, tenant: str, agent_id: str, entry: bytes, ephemeral: bool) -> bool:
        keys = TenantAgentKeys.of(tenant)
        ttl = self.ttl_ms if ephemeral else 0
        key = keys.agent(agent_id)
        sealed = self.sealer.seal(entry, entry_aad(key))
        args = CreateAgentArgs(sealed, ttl).argv()
        done = await self._scripts.create_agent(keys=[keys.index, key], args=args)
        return bool(done)

    @translated
    async def read(self, tenant: str, agent_id: str) -> bytes | None:
        key = TenantAgentKeys.of(tenant).agent(agent_id)
        raw = await self._scripts.read_agent(keys=[key], args=ReadAgentArgs(self.ttl_ms).argv())
        return raw if raw is None else self.sealer.open(bytes(raw), entry_aad(key))

    @translated
    async def replace(self, tenant: str, agent_id: str, revision: int, entry: bytes) -> str:
        key = TenantAgentKeys.of(tenant).agent(agent_id)
        raw = await self.client.get(key)
        if raw is None:
            return "gone"
        stored = raw if isinstance(raw, bytes) else raw.encode()
        current = orjson.loads(self.sealer.open(stored, entry_aad(key)))
        if current.get("revision") != revision:
            return "conflict"
        new = self.sealer.seal(entry, entry_aad(key))
        args = ReplaceAgentArgs(stored, new, self.ttl_ms).argv()
        return _text(await self._scripts.replace_agent(keys=[key], args=args))

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
        return [
            self.sealer.open(v if isinstance(v, bytes) else v.encode(), entry_aad(m))
            for m, v in zip(members, values, strict=True)
            if v is not None
        ]


def entry_aad(key: str) -> bytes:
    """The associated data of an agent entry: its own key (tenant digest and agent id)."""
    return f"gw1|{key}|agent".encode()
