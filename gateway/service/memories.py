"""A principal's long-term memories about a subject, without any context: listing them
(a right-of-access request) and erasing them (a right-to-erasure request).

They are found through Cortadel's list API under the Cortadel user id of (tenant, user,
subject), superseded versions included, so both work after the contexts that stored them
are gone. A tenant admin may act for a user of the tenant.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import (
    ContextNotFoundError,
    ForbiddenError,
    UnavailableError,
    UnsupportedOperationError,
)
from gateway.longterm.cortadel import Cortadel, retryable
from gateway.longterm.erasure import StoredMemory, erase_all, listed
from gateway.longterm.recall import LongTermMemory
from gateway.longterm.tools import BoundTools
from gateway.principal import Principal
from gateway.store.redis_store import Store

__all__ = ["MemoryService"]


UNAVAILABLE = "Long-term memory is unavailable; retry later"


@dataclass
class MemoryService:
    cortadel: Cortadel | None
    longterm: LongTermMemory | None = None
    store: Store | None = None

    async def tools_for(self, principal: Principal, context_id: str) -> BoundTools:
        """The memory tools of one of the caller's contexts, bound to its subject (the
        deployment's options)."""
        if self.longterm is None or self.store is None:
            raise UnsupportedOperationError("Long-term memory is off")
        if await self.store.read_context(principal, context_id, 1, 0) is None:
            raise ContextNotFoundError()
        subject = await self.store.context_subject(principal, context_id)
        options = self.longterm.defaults
        return self.longterm.tools(principal.tenant, principal.user, context_id, subject, options)

    def _client(self, principal: Principal, user: str | None, subject: str | None) -> object:
        if self.cortadel is None:
            raise UnsupportedOperationError(
                "Long-term memory is off (GATEWAY_CORTADEL_URL is not set)"
            )
        if user is not None and user != principal.user and "admin" not in principal.roles:
            raise ForbiddenError("Acting for another user needs an admin principal")
        try:
            return self.cortadel.client(principal.tenant, user or principal.user, subject=subject)
        except Exception as exc:
            raise UnavailableError(UNAVAILABLE) from exc

    async def list(
        self, principal: Principal, subject: str | None, user: str | None = None
    ) -> list[StoredMemory]:
        client = self._client(principal, user, subject)
        try:
            return await listed(client)
        except Exception as exc:
            if retryable(exc):
                raise UnavailableError(UNAVAILABLE) from exc
            raise

    async def erase(
        self, principal: Principal, subject: str | None, user: str | None = None
    ) -> int:
        """Delete them all; how many were deleted."""
        client = self._client(principal, user, subject)
        try:
            return await erase_all(client)
        except Exception as exc:
            if retryable(exc):
                raise UnavailableError(UNAVAILABLE) from exc
            raise
