"""The audit trail as read back (frozen dataclasses): never content."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AuditPage", "AuditRecord"]


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """An entry of the audit trail as read back: who (None: not known), the operation, its
    status and outcome, the ids it named (by the names shown, in their order) and what a
    scrub removed (by kind, empty for other operations). Never content."""

    id: str
    time_ms: int
    tenant: str | None
    user: str | None
    credential: str | None
    operation: str
    method: str
    status: int
    outcome: str
    request_id: str | None
    client: str | None
    ids: dict[str, str]
    removed: dict[str, int]


@dataclass(frozen=True, slots=True)
class AuditPage:
    """A page of the audit trail, newest first; ``next_cursor`` None: nothing older."""

    items: list[AuditRecord]
    next_cursor: str | None
