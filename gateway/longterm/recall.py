"""Recall before a run, and what a finished run queues for storing.

Recall runs inside the run (never on the request path), bounded by
``recallTimeoutMs``. It fails open: a timeout or a Cortadel error leaves the run
without memories, counted in a metric and logged without content. With ``strict``
the run fails instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway import metrics, tracing
from gateway.agents.base import RecalledMemory
from gateway.audit.entry import AuditEntry
from gateway.clock import now_ms
from gateway.longterm.cortadel import Cortadel, CortadelUnavailable
from gateway.longterm.render import MAX_QUERY_CHARS, message_text, render_block, select_hits
from gateway.longterm.tools import BoundTools
from gateway.options.longterm import MemoryOptions
from gateway.principal import Principal
from gateway.store.audit_store import AuditStore
from gateway.store.longterm_store import LongTermStore

__all__ = ["LongTermMemory", "RecallFailed", "RecalledMemory", "subject_of"]

log = logging.getLogger("gateway.cortadel")


def subject_of(message: Mapping[str, Any]) -> str | None:
    """The subject a stored message carries (its context's), or None."""
    subject = (message.get("metadata") or {}).get("subject")
    return subject if isinstance(subject, str) and subject else None


class RecallFailed(Exception):
    """Recall failed and the agent's options are strict."""


def _counted(outcome: str, hits: int = 0) -> None:
    metrics.RECALLS.labels(outcome).inc()
    tracing.annotate({"gateway.recall.outcome": outcome, "gateway.recall.hits": hits})


class LongTermMemory:
    def __init__(
        self,
        cortadel: Cortadel,
        store: LongTermStore,
        defaults: MemoryOptions,
        audit: AuditStore | None = None,
    ) -> None:
        self.cortadel, self.store, self.defaults = cortadel, store, defaults
        self._audit = audit  # where a run shown memories records their ids
        self._by_agent: dict[bytes, MemoryOptions] = {}

    def options_for(self, agent: object) -> MemoryOptions:
        """The options for an agent: the defaults with its ``memory_options`` applied."""
        overrides: Mapping[str, Any] | None = getattr(agent, "memory_options", None)
        if not overrides:
            return self.defaults
        key = orjson.dumps(dict(overrides), option=orjson.OPT_SORT_KEYS)
        if key not in self._by_agent:
            self._by_agent[key] = self.defaults.overridden(overrides)
        return self._by_agent[key]

    async def recall(
        self,
        tenant: str,
        user: str,
        context_id: str,
        message: Mapping[str, Any],
        options: MemoryOptions,
    ) -> RecalledMemory | None:
        if not options.retrieve:
            return None
        with tracing.span("gateway.recall", {"gateway.context.id": context_id}):
            query = message_text(message, options.include_data)[:MAX_QUERY_CHARS]
            tracing.annotate({"gateway.recall.query_chars": len(query)})
            if not query.strip() or options.memory_header in query:
                _counted("skipped")
                return None
            started = time.perf_counter()
            try:
                hits = await asyncio.wait_for(
                    self._search(tenant, user, context_id, subject_of(message), query, options),
                    options.recall_timeout_ms / 1000,
                )
            except Exception as exc:
                outcome = "timeout" if isinstance(exc, TimeoutError) else "failed"
                reason = exc.reason if isinstance(exc, CortadelUnavailable) else type(exc).__name__
                _counted(outcome)
                tracing.failed(exc)
                tracing.annotate({"gateway.recall.reason": reason})
                log.warning(
                    "recall failed; run proceeds without memories",
                    extra={"outcome": outcome, "reason": reason, "strict": options.strict},
                )
                if options.strict:
                    raise RecallFailed(outcome) from exc
                return None
            finally:
                metrics.RECALL_SECONDS.observe(time.perf_counter() - started)
            if options.dedupe_across_turns and hits:
                fresh = await self.store.remember(
                    Principal(tenant, user),
                    context_id,
                    [h.id for h in hits],
                    options.max_remembered_ids,
                )
                hits = [h for h in hits if h.id in fresh]
            _counted("hits" if hits else "empty", len(hits))
            if not hits:
                return None
            lines = tuple(h.text for h in hits)
            return RecalledMemory(
                lines,
                render_block(lines, options.memory_header),
                options.inject_as,
                options.memory_header,
                tuple(h.id for h in hits),
            )

    async def shown(
        self, tenant: str, user: str, context_id: str, task_id: str, ids: Sequence[str]
    ) -> None:
        """Record in the audit trail which memories a run was shown (their ids, never
        content), best effort: the run goes on if the record fails."""
        if self._audit is None:
            return
        entry = AuditEntry(
            time_ms=now_ms(),
            tenant=tenant,
            user=user,
            credential="run",
            operation="recall_memories",
            method="RUN",
            status=200,
            request_id="",
            ids={"context": context_id, "task": task_id, "recalled": ",".join(ids)},
        )
        try:
            await self._audit.append([entry])
        except Exception as exc:
            log.warning(
                "recall not recorded in the audit trail", extra={"error": type(exc).__name__}
            )

    def tools(
        self,
        tenant: str,
        user: str,
        context_id: str,
        subject: str | None,
        options: MemoryOptions,
    ) -> BoundTools:
        """The memory tools of a run, bound to its (tenant, user, subject) and context."""
        session = self.session_of(context_id, subject, options)
        return BoundTools(
            self.cortadel, self.store, options, tenant, user, context_id, subject, session
        )

    def session_of(self, context_id: str, subject: str | None, o: MemoryOptions) -> str | None:
        """The session a search is confined to: the context, when the options say so or
        the context has no subject (unless ``SUBJECTLESS_RECALL=user``); else none."""
        own = subject is None and self.cortadel.settings.subjectless_recall == "context"
        return context_id if o.scope_recall_to_session or own else None

    async def _search(
        self,
        tenant: str,
        user: str,
        context_id: str,
        subject: str | None,
        query: str,
        o: MemoryOptions,
    ) -> list[Any]:
        from cortadel import SearchOptions

        client = self.cortadel.client(tenant, user, o.app_name, subject)
        found = await client.search(
            query,
            SearchOptions(
                top_k=o.top_k,
                mode=o.search_mode,
                session_id=self.session_of(context_id, subject, o),
                rerank=o.rerank,
                memory_type=o.memory_type,
            ),
        )
        return select_hits(found.results, o.min_score)
