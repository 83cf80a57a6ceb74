"""The long-term memory tools a model may call (``memory.tools``): search and add, bound to
one run's (tenant, user, subject) and context, so the model cannot reach another subject by
asking. Their replies are the text the model sees, as Cortadel's own integrations word them;
a Cortadel failure is one such reply, never an error of the run.

``add`` stores through ``from-conversation`` with the context as session, so what the model
adds is in the context's ledger (and its session): a scrub deletes it with the rest.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gateway import metrics
from gateway.longterm.cortadel import Cortadel
from gateway.longterm.render import MAX_QUERY_CHARS, MAX_STORED_CHARS, select_hits
from gateway.options.longterm import MemoryOptions
from gateway.principal import Principal
from gateway.store.longterm_store import LongTermStore

__all__ = ["NONE_FOUND", "UNAVAILABLE", "BoundTools"]

log = logging.getLogger("gateway.cortadel")

NONE_FOUND = "No relevant memories found."
UNAVAILABLE = "Memory is temporarily unavailable; answer without it."
STORED = "Stored."
DUPLICATE = "Already remembered; nothing new stored."


@dataclass
class BoundTools:
    cortadel: Cortadel
    store: LongTermStore
    options: MemoryOptions
    tenant: str
    user: str
    context_id: str
    subject: str | None
    session: str | None  # the session recall is confined to (see ``session_of``)

    @property
    def search_name(self) -> str:
        return self.options.search_tool_name

    @property
    def add_name(self) -> str:
        return self.options.add_tool_name

    def _client(self) -> Any:
        return self.cortadel.client(self.tenant, self.user, self.options.app_name, self.subject)

    async def search(self, query: str, top_k: int) -> str:
        from cortadel import SearchOptions

        query = query[:MAX_QUERY_CHARS]
        if not query.strip():
            return NONE_FOUND
        o = self.options
        options = SearchOptions(
            top_k=max(1, min(50, top_k)),
            mode=o.search_mode,
            session_id=self.session,
            rerank=o.rerank,
            memory_type=o.memory_type,
        )
        try:
            found = await self._client().search(query, options)
        except Exception as exc:
            return _unavailable("search", exc)
        hits = select_hits(found.results, o.min_score)
        if not hits:
            return NONE_FOUND
        return "\n".join(f"{n}. {hit.text}" for n, hit in enumerate(hits, 1))

    async def add(self, text: str) -> str:
        from cortadel import ChatMessage, ConversationOptions

        text = text.strip()[:MAX_STORED_CHARS]
        if not text:
            return "Nothing to store."
        o = self.options
        options = ConversationOptions(
            is_agent_memory=o.is_agent_memory,
            tags=o.tags or None,
            project=o.project,
            session_id=self.context_id,
        )
        try:
            result = await self._client().add_conversation(
                [ChatMessage(role="user", content=text)], options
            )
        except Exception as exc:
            return _unavailable("add", exc)
        items = [r for r in result.results or () if r.id and r.event != "ERROR"]
        principal = Principal(self.tenant, self.user)
        if not await self.store.add_to_ledger(principal, self.context_id, [r.id for r in items]):
            # the context was scrubbed meanwhile: what was just stored goes too
            await self._client().delete([r.id for r in items])
            return UNAVAILABLE
        events = {r.event for r in items}
        if not items or events == {"SKIP_DUPLICATE"}:
            return DUPLICATE
        if events <= {"ADD"}:
            return STORED
        return f"Stored (event: {', '.join(sorted(e for e in events if e))})."


def _unavailable(tool: str, exc: Exception) -> str:
    metrics.RECALLS.labels("failed").inc()
    log.warning("memory tool failed", extra={"tool": tool, "error": type(exc).__name__})
    return UNAVAILABLE
