"""Listing, reading and scrubbing a principal's contexts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import ContextNotFoundError
from gateway.principal import Principal
from gateway.store.redis_store import Store

__all__ = ["ContextService"]


@dataclass
class ContextService:
    store: Store

    async def list(self, principal: Principal, limit: int, offset: int) -> dict[str, Any]:
        items, total = await self.store.list_contexts(principal.keys, limit, offset)
        return {"items": items, "total": total, "limit": limit, "offset": offset}

    async def read(
        self, principal: Principal, context_id: str, limit: int, offset: int
    ) -> dict[str, Any]:
        page = await self.store.read_context(principal.keys, context_id, limit, offset)
        if page is None:
            raise ContextNotFoundError()
        return page

    async def delete(self, principal: Principal, context_id: str) -> None:
        """Scrub the context: every key of it, its index entries; running tasks stop."""
        if not await self.store.scrub(principal.keys, context_id):
            raise ContextNotFoundError()
