"""A run of an agent as a job, and the queue interface that executes jobs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.store.redis_store import RunInputs

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
    # Handed over by the send that created the job, so the run needs no read. A queue
    # that serialises jobs drops it; the run then loads its inputs itself.
    inputs: RunInputs | None = field(default=None, compare=False)


class JobQueue(Protocol):
    async def enqueue(self, job: RunJob) -> None: ...

    async def start(self) -> None: ...

    async def stop(self, grace_seconds: float) -> None: ...
