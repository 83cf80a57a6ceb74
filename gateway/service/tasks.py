"""Reading and canceling tasks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime

from gateway import metrics
from gateway.engine.status import status_json
from gateway.errors import TaskNotCancelableError, TaskNotFoundError
from gateway.models import Task
from gateway.principal import Principal
from gateway.store.redis_store import Store

__all__ = ["TaskFilter", "TaskPage", "TaskService"]


@dataclass(frozen=True)
class TaskFilter:
    """Which of a principal's tasks a listing shows, and one page of them: newest status
    first (ties by id), starting after the ``after`` cursor (a status timestamp and id)."""

    context_id: str | None = None
    state: str | None = None
    updated_after: datetime | None = None
    page_size: int = 50
    after: tuple[str, str] | None = None
    history_length: int = 0
    artifacts: bool = False


@dataclass(frozen=True)
class TaskPage:
    tasks: list[Task]
    total: int
    last: tuple[str, str] | None  # the cursor of the last task, when more follow


def _instant(stamp: str) -> datetime:
    try:
        return datetime.fromisoformat(stamp)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


@dataclass
class TaskService:
    store: Store

    async def _context_of(self, principal: Principal, task_id: str) -> str:
        context_id = await self.store.task_context(principal, task_id)
        if context_id is None:
            raise TaskNotFoundError()
        return context_id

    async def get(self, principal: Principal, task_id: str, history_length: int | None) -> Task:
        context_id = await self._context_of(principal, task_id)
        task = await self.store.read_task(principal, context_id, task_id, history_length)
        if task is None:
            raise TaskNotFoundError()
        return task

    async def cancel(self, principal: Principal, task_id: str) -> Task:
        context_id = await self._context_of(principal, task_id)
        status = status_json("canceled", context_id, task_id, "Canceled at the client's request.")
        outcome, state = await self.store.cancel_task(principal, context_id, task_id, status)
        if outcome == "notask":
            raise TaskNotFoundError()
        if outcome == "terminal":
            raise TaskNotCancelableError(data={"state": state})
        metrics.TASK_TRANSITIONS.labels("canceled").inc()
        return await self.get(principal, task_id, None)

    async def list(self, principal: Principal, f: TaskFilter) -> TaskPage:
        """The principal's tasks matching ``f`` (only theirs: the user's own task index)."""
        index = await self.store.task_contexts(principal)
        pairs = [(t, c) for t, c in index.items() if f.context_id in (None, c)]
        statuses = await self.store.task_statuses(principal, pairs)
        matching: list[tuple[tuple[str, str], str, str]] = []
        for (tid, cid), status in zip(pairs, statuses, strict=True):
            if status is None:
                continue
            stamp = str(status.get("timestamp", ""))
            if f.state is not None and status.get("state") != f.state:
                continue
            if f.updated_after is not None and _instant(stamp) <= f.updated_after:
                continue
            matching.append(((stamp, tid), tid, cid))
        matching.sort(reverse=True)
        start = 0
        if f.after is not None:  # a cursor: the tasks after it in this order
            start = next((i for i, m in enumerate(matching) if m[0] < f.after), len(matching))
        page = matching[start : start + f.page_size]
        tasks = await asyncio.gather(
            *(self.store.read_task(principal, c, t, f.history_length) for _, t, c in page)
        )
        shown = [t if f.artifacts else t.without_artifacts() for t in tasks if t is not None]
        more = start + f.page_size < len(matching)
        return TaskPage(shown, len(matching), page[-1][0] if more and page else None)
