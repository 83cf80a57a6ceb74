"""Re-embedding a context whose vectors are of another model than the running embedder's.

Vectors name their model (``vmodel`` in the context meta); a query is only ever scored
against vectors of the embedder that embeds it. When the search or the indexer meets a
context embedded by another model (or before vectors named theirs), its vectors are dropped
and its user messages queued again for the indexer; until they are all embedded the context
is searched by words (``vre`` in the meta).
"""

from __future__ import annotations

import logging

import orjson

from gateway.context_memory.text import embeddable_text
from gateway.principal import Principal
from gateway.store.memory_store import MemoryStore

__all__ = ["job_json", "reembed"]

log = logging.getLogger("gateway.memory")


def job_json(tenant: str, user: str, context_id: str) -> bytes:
    """An embedding job's ids, as the send script queues them."""
    return orjson.dumps({"t": tenant, "u": user, "c": context_id})


async def reembed(
    store: MemoryStore, principal: Principal, context_id: str, model: str, job: bytes
) -> bool:
    """Queue the context's user messages again for ``model``; False when another process
    already did (its vectors are of ``model``) or the context is gone."""
    state = await store.embedding_state(principal, context_id)
    if state is None:
        return False
    last, queued = state
    messages = await store.messages_after(principal, context_id, 0, last)
    seqs = [s for s, m in messages if m.get("role") == "user" and embeddable_text(m)]
    started = await store.reset_vectors(principal, context_id, model, seqs, queued, job)
    if started:
        log.info("context re-embedding started", extra={"messages": len(seqs)})
    return started
