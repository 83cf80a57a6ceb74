"""A run of an agent as a job, and the queue interface that executes jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["JobQueue", "RunJob"]


@dataclass(frozen=True, slots=True)
class RunJob:
    """Everything needed to run the agent on one accepted message (ids only, no content)."""

    tenant: str
    user: str
    agent_id: str
    context_id: str
    task_id: str
    seq: int
    reference_ids: Sequence[str] = ()


class JobQueue(Protocol):
    async def enqueue(self, job: RunJob) -> None: ...

    async def start(self) -> None: ...

    async def stop(self, grace_seconds: float) -> None: ...
