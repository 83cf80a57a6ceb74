"""Managing API keys: create (shown once), list, revoke, rotate.

Over HTTP an ``admin`` principal manages its own tenant's keys; the command line
(``gateway keys``) manages any tenant's. Over HTTP a key may be made (or rotated) for the
caller itself or for a service user — one no other credential names: no static key, no
token (``jwt:`` users), no key the operator made, and no data of a user without keys made
over HTTP (a static key since removed) — and carry only roles the caller holds.
A key for a user who exists otherwise is acting for that user: it needs the
``impersonate`` role, which only the operator grants, and its audit entry says so.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from gateway.api_keys import CreatedKey, KeyRecord, key_mac, new_key
from gateway.clock import now_ms
from gateway.errors import ApiKeyNotFoundError, ForbiddenError
from gateway.principal import IMPERSONATE, JWT_USER_PREFIX, Principal
from gateway.store.apikeys_store import ApiKeyStore
from gateway.store.redis_store import Store

__all__ = ["Issued", "KeyService"]

HTTP, CLI = "http", "cli"


def admin_tenant(principal: Principal) -> str:
    if "admin" not in principal.roles:
        raise ForbiddenError("Managing API keys needs an admin principal")
    return principal.tenant


@dataclass(frozen=True)
class Issued:
    """A key made over HTTP, and the user it acts for when that is another's (None: the
    caller's own or a service user's)."""

    created: CreatedKey
    acting_for: str | None = None


@dataclass
class KeyService:
    store: ApiKeyStore
    secret: bytes
    # (tenant, user) of every key of GATEWAY_API_KEYS
    static_users: Set[tuple[str, str]] = field(default_factory=frozenset)
    # where users' contexts are (None: the command line, which needs no such check)
    contexts: Store | None = None

    async def create(
        self,
        tenant: str,
        user: str,
        roles: list[str],
        name: str = "",
        expires_in_seconds: int | None = None,
        *,
        origin: str = CLI,
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
            origin=origin,
        )
        await self.store.add(record)
        return CreatedKey(record, key)

    async def _known_elsewhere(self, tenant: str, user: str) -> bool:
        """Whether a credential other than tenant admins' keys names the user."""
        if user.startswith(JWT_USER_PREFIX) or (tenant, user) in self.static_users:
            return True
        records = [r for r in await self.store.list(tenant) if r.user == user]
        if any(r.origin != HTTP for r in records):
            return True
        if records or self.contexts is None:
            return False
        _, stored = await self.contexts.list_contexts(Principal(tenant, user), 1, 0)
        return stored > 0

    async def _may_issue(self, principal: Principal, user: str, roles: Set[str]) -> str | None:
        """Refuses a key the caller may not have made; the user it acts for, if another's."""
        if IMPERSONATE in roles:
            raise ForbiddenError("The impersonate role is granted by the operator only")
        if not roles <= principal.roles:
            raise ForbiddenError("A key may carry only roles its maker holds")
        if user == principal.user or not await self._known_elsewhere(principal.tenant, user):
            return None
        if IMPERSONATE not in principal.roles:
            raise ForbiddenError(
                "A key for an existing user needs the impersonate role; "
                "make one for yourself or for a new service user"
            )
        return user

    async def issue(
        self,
        principal: Principal,
        user: str | None,
        roles: list[str],
        name: str = "",
        expires_in_seconds: int | None = None,
    ) -> Issued:
        """``POST /keys``: a key of the caller's tenant (``user`` None: for the caller)."""
        tenant = admin_tenant(principal)
        user = principal.user if user is None else user
        acting_for = await self._may_issue(principal, user, set(roles))
        created = await self.create(tenant, user, roles, name, expires_in_seconds, origin=HTTP)
        return Issued(created, acting_for)

    async def reissue(self, principal: Principal, key_id: str, grace_seconds: int) -> Issued:
        """``POST /keys/{id}:rotate``: a rotation hands the caller a key for the old key's
        user, so it is held to the rules of ``issue``."""
        tenant = admin_tenant(principal)
        old = await self._existing(tenant, key_id)
        acting_for = await self._may_issue(principal, old.user, set(old.roles))
        return Issued(await self.rotate(tenant, key_id, grace_seconds), acting_for)

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
        """A new key for the same principal and roles (made the way the old one was); the
        old one ends now, or after ``grace_seconds`` (for clients to switch)."""
        old = await self._existing(tenant, key_id)
        now = now_ms()
        if not old.usable(now):
            raise ApiKeyNotFoundError("No usable API key with this id (revoked or expired)")
        remaining = (old.expires_ms - now) // 1000 if old.expires_ms else None
        created = await self.create(
            old.tenant, old.user, list(old.roles), old.name, remaining, origin=old.origin or CLI
        )
        if grace_seconds:
            ends = now + grace_seconds * 1000
            if old.expires_ms:
                ends = min(ends, old.expires_ms)
            await self.store.end(key_id, expires_ms=ends, replaced_by=created.record.id)
        else:
            await self.store.end(key_id, revoked_ms=now, replaced_by=created.record.id)
        return created
