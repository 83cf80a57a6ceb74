"""Managing API keys: create (shown once), list, revoke, rotate.

Over HTTP an ``admin`` principal manages its own tenant's keys; the command line
(``gateway keys``) manages any tenant's.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.api_keys import CreatedKey, KeyRecord, key_mac, new_key
from gateway.errors import ApiKeyNotFoundError, ForbiddenError
from gateway.principal import Principal
from gateway.store.apikeys_store import ApiKeyStore
from gateway.store.assembly import now_ms

__all__ = ["KeyService"]


def admin_tenant(principal: Principal) -> str:
    if "admin" not in principal.roles:
        raise ForbiddenError("Managing API keys needs an admin principal")
    return principal.tenant


@dataclass
class KeyService:
    store: ApiKeyStore
    secret: bytes

    async def create(
        self,
        tenant: str,
        user: str,
        roles: list[str],
        name: str = "",
        expires_in_seconds: int | None = None,
    ) -> CreatedKey:
        """A new key: its record and the key, the only time it is shown."""
        key_id, key = new_key()
        created = now_ms()
        record = KeyRecord(
            id=key_id,
            tenant=tenant,
            user=user,
            mac=key_mac(self.secret, key),
            roles=tuple(sorted(set(roles))),
            name=name,
            created_ms=created,
            expires_ms=created + expires_in_seconds * 1000 if expires_in_seconds else 0,
        )
        await self.store.add(record)
        return CreatedKey(record, key)

    async def list(self, tenant: str | None) -> list[KeyRecord]:
        return list(await self.store.list(tenant))

    async def _existing(self, tenant: str | None, key_id: str) -> KeyRecord:
        record = await self.store.get(key_id)
        if record is None or (tenant is not None and record.tenant != tenant):
            raise ApiKeyNotFoundError()
        return record

    async def read(self, tenant: str | None, key_id: str) -> KeyRecord:
        return await self._existing(tenant, key_id)

    async def revoke(self, tenant: str | None, key_id: str) -> KeyRecord:
        record = await self._existing(tenant, key_id)
        if not record.revoked_ms:
            await self.store.end(key_id, revoked_ms=now_ms())
        return await self._existing(tenant, key_id)

    async def rotate(self, tenant: str | None, key_id: str, grace_seconds: int = 0) -> CreatedKey:
        """A new key for the same principal and roles; the old one ends now, or after
        ``grace_seconds`` (for clients to switch)."""
        old = await self._existing(tenant, key_id)
        now = now_ms()
        if not old.usable(now):
            raise ApiKeyNotFoundError("No usable API key with this id (revoked or expired)")
        remaining = (old.expires_ms - now) // 1000 if old.expires_ms else None
        created = await self.create(old.tenant, old.user, list(old.roles), old.name, remaining)
        if grace_seconds:
            ends = now + grace_seconds * 1000
            if old.expires_ms:
                ends = min(ends, old.expires_ms)
            await self.store.end(key_id, expires_ms=ends, replaced_by=created.record.id)
        else:
            await self.store.end(key_id, revoked_ms=now, replaced_by=created.record.id)
        return created
