"""What the services return of contexts (frozen dataclasses): a listing, a page of a
context's tasks, what a scrub removed, a search's hits."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.models.tasks import Task

__all__ = ["ContextList", "ContextPage", "ContextSummary", "ScrubReport", "SearchHit"]


@dataclass(frozen=True, slots=True)
class ContextSummary:
    """One entry of a listing of contexts (times in epoch milliseconds)."""

    id: str
    created_ms: int
    updated_ms: int
    expires_ms: int
    task_count: int


@dataclass(frozen=True, slots=True)
class ContextList:
    items: list[ContextSummary]
    total: int
    limit: int
    offset: int


@dataclass(frozen=True, slots=True)
class ContextPage:
    """A page of a context's tasks (oldest first), with its expiry and the count of its
    messages embedded and still waiting to be (context memory)."""

    id: str
    tasks: list[Task]
    total: int
    limit: int
    offset: int
    expires_ms: int
    indexed: int
    pending: int
    subject: str | None = None  # what the context is about, once bound


@dataclass(frozen=True, slots=True)
class ScrubReport:
    """What scrubbing a context removed: messages, tasks, vectors (embedded messages), runs
    and waiting messages or webhook deliveries of its unfinished tasks, dead letters, and
    long-term memories queued for deletion in Cortadel. The store's scrub returns what it
    removed from the context's keys; the service adds the deliveries and dead letters kept
    elsewhere."""

    messages: int
    tasks: int
    vectors: int
    pending_jobs: int
    dead_letters: int
    memories_queued: int


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A message found by a context search: its ids, its score, its embeddable text."""

    message_id: str | None
    task_id: str | None
    score: float
    text: str
