"""Listing, reading and scrubbing a principal's contexts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.errors import ContextNotFoundError
from gateway.longterm.wire import forget_job
from gateway.models import ContextList, ContextPage, ScrubReport
from gateway.principal import Principal
from gateway.store.jobs import JobStore
from gateway.store.keys import PUSH, PUSH_GROUP
from gateway.store.redis_store import Store

__all__ = ["ContextService"]


@dataclass
class ContextService:
    store: Store
    # the job streams whose dead letters are scrubbed with a context (the runtime's: runs,
    # embeddings, the Cortadel outbox, webhook deliveries)
    job_streams: Sequence[JobStore]
    forget_memories: bool = False  # also delete the context's long-term memories (Cortadel)

    def __post_init__(self) -> None:
        # Webhook deliveries still queued for the context go with it: the push stream read
        # as "dead letters" is the queue itself (a delivery under way stops at its next
        # attempt, which finds the context gone).
        self._push_queue = JobStore(self.store.client, PUSH, PUSH_GROUP, PUSH)

    async def list(self, principal: Principal, limit: int, offset: int) -> ContextList:
        items, total = await self.store.list_contexts(principal, limit, offset)
        return ContextList(items, total, limit, offset)

    async def read(
        self, principal: Principal, context_id: str, limit: int, offset: int
    ) -> ContextPage:
        page = await self.store.read_context(principal, context_id, limit, offset)
        if page is None:
            raise ContextNotFoundError()
        return page

    async def delete(
        self, principal: Principal, context_id: str, request_id: str = ""
    ) -> ScrubReport:
        """Scrub the context: every key of it, its index entries; running tasks stop; the
        long-term memories its turns added are queued for deletion (the job names the
        scrub's ``request_id``, so their deletion is recorded against it). Then its dead
        letters go (also when the context was already gone, so a retried scrub finishes
        the job). Returns the receipt: how many of each kind were removed."""
        forget = b""
        if self.forget_memories:
            subject = await self.store.context_subject(principal, context_id)
            token = self.store.subject_token(principal, context_id, subject) if subject else ""
            forget = forget_job(principal.tenant, principal.user, context_id, request_id, token)
        receipt = await self.store.scrub(principal, context_id, forget)
        dead = 0
        for stream in self.job_streams:
            dead += await stream.forget_context(principal.tenant, principal.user, context_id)
        deliveries = await self._push_queue.forget_context(
            principal.tenant, principal.user, context_id
        )
        if receipt is None:
            raise ContextNotFoundError()
        return replace(receipt, pending_jobs=receipt.pending_jobs + deliveries, dead_letters=dead)
