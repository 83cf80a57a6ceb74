"""Listing, reading and scrubbing a principal's contexts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import ContextNotFoundError
from gateway.longterm.wire import forget_job
from gateway.principal import Principal
from gateway.store.redis_store import Store

__all__ = ["ContextService"]


@dataclass
class ContextService:
    store: Store
    forget_memories: bool = False  # also delete the context's long-term memories (Cortadel)

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
        """Scrub the context: every key of it, its index entries; running tasks stop; the
        long-term memories its turns added are queued for deletion."""
        forget = b""
        if self.forget_memories:
            forget = forget_job(principal.tenant, principal.user, context_id)
        if not await self.store.scrub(principal.keys, context_id, forget):
            raise ContextNotFoundError()
