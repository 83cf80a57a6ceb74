"""Reading and canceling tasks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway import metrics
from gateway.engine.status import status_json
from gateway.errors import TaskNotCancelableError, TaskNotFoundError
from gateway.principal import Principal
from gateway.store.redis_store import Store

__all__ = ["TaskService"]


@dataclass
class TaskService:
    store: Store

    async def _context_of(self, principal: Principal, task_id: str) -> str:
        context_id = await self.store.task_context(principal.keys, task_id)
        if context_id is None:
            raise TaskNotFoundError()
        return context_id

    async def get(
        self, principal: Principal, task_id: str, history_length: int | None
    ) -> dict[str, Any]:
        context_id = await self._context_of(principal, task_id)
        task = await self.store.read_task(principal.keys, context_id, task_id, history_length)
        if task is None:
            raise TaskNotFoundError()
        return task

    async def cancel(self, principal: Principal, task_id: str) -> dict[str, Any]:
        context_id = await self._context_of(principal, task_id)
        status = status_json("canceled", context_id, task_id, "Canceled at the client's request.")
        outcome, state = await self.store.cancel_task(principal.keys, context_id, task_id, status)
        if outcome == "notask":
            raise TaskNotFoundError()
        if outcome == "terminal":
            raise TaskNotCancelableError(data={"state": state})
        metrics.TASK_TRANSITIONS.labels("canceled").inc()
        return await self.get(principal, task_id, None)
