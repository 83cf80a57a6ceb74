"""Reading the audit trail: a tenant's entries, newest first, filtered, in pages."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from gateway.audit.entry import hashed_id, record_of
from gateway.models import AuditPage, AuditRecord
from gateway.store.audit_store import AuditStore

__all__ = ["AuditQuery", "AuditService"]

_BATCH = 500
_SCAN_PER_PAGE = 20  # entries looked at per entry asked for, before a page is cut short
# Entries are written in batches behind the requests, so an entry's stream id is a little
# later than its time: ``until`` scans this much past it, and both time filters are applied
# to the entries' own times.
_WRITE_LAG_MS = 60_000


@dataclass(frozen=True)
class AuditQuery:
    user: str | None = None
    context: str | None = None
    operation: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    cursor: str | None = None  # the id of the last entry of the previous page
    limit: int = 100

    @cached_property
    def _contexts(self) -> tuple[str, ...]:
        # A context named by a refused or failed request is recorded as its digest.
        return () if self.context is None else (self.context, hashed_id(self.context))

    def matches(self, entry: AuditRecord) -> bool:
        return (
            (self.since_ms is None or entry.time_ms >= self.since_ms)
            and (self.until_ms is None or entry.time_ms <= self.until_ms)
            and (self.user is None or entry.user == self.user)
            and (self.context is None or entry.ids.get("contextId") in self._contexts)
            and (self.operation is None or entry.operation == self.operation)
        )


@dataclass
class AuditService:
    store: AuditStore

    async def read(self, tenant: str | None, query: AuditQuery) -> AuditPage:
        """Entries newest first; the cursor continues where this page stopped (None:
        nothing older). Filters are applied while scanning; a page that looked at many
        entries without filling up stops early and gives its cursor."""
        empty = AuditPage([], None)
        if query.cursor is not None:
            if query.cursor.strip("0-") == "":  # nothing is older than 0-0
                return empty
            newest = f"({query.cursor}"
        elif query.until_ms is not None:
            if query.until_ms < 0:  # before any entry
                return empty
            newest = str(query.until_ms + _WRITE_LAG_MS)
        else:
            newest = "+"
        oldest = "-" if query.since_ms is None else str(max(0, query.since_ms))
        items: list[AuditRecord] = []
        budget = query.limit * _SCAN_PER_PAGE
        last: str | None = None
        while budget > 0:
            count = min(_BATCH, budget)
            page = await self.store.page(tenant, newest, oldest, count)
            budget -= len(page)
            for entry_id, fields in page:
                last = entry_id
                record = record_of(entry_id, fields)
                if query.matches(record):
                    items.append(record)
                    if len(items) == query.limit:
                        return AuditPage(items, last)
            if len(page) < count:
                return AuditPage(items, None)
            newest = f"({last}"
        return AuditPage(items, last)
