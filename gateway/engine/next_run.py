"""The next run of a task: what happens when a run ends while later messages wait for it.

The run's finishing write (``UPDATE``'s finish step, ``store/lua/update.py``) does not
settle the task then: it stores the run's outputs, leaves the task ``submitted`` and queues
the next waiting message's run, on the jobs stream (where any worker takes it) or, for a
run of this process's queue, handed back with the write's answer. ``NextRuns`` is the
engine's side of it: the status the task waits in (``status``), and what follows a write
that chained (``chained``): the ended run's waiters told, and a run handed back queued here.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.engine.events import NEXT, TaskEvent, TaskEvents
from gateway.engine.runs import RunJob
from gateway.engine.status import status_json
from gateway.store.redis_store import UpdateResult

__all__ = ["NextRuns"]


class NextRuns:
    """The engine's side of a task's next run, shared by every run of this process."""

    def __init__(self, events: TaskEvents) -> None:
        self.events = events
        # Where the next waiting message's run goes when this process queues it itself (set
        # by the in-process queue; the durable queue's next runs are queued by the store).
        self.queue_here: Callable[[RunJob], None] | None = None

    @staticmethod
    def status() -> bytes:
        """The status of a task whose next run is queued, given with a finishing write."""
        return status_json("submitted")

    def chained(
        self, job: RunJob, result: UpdateResult, status: bytes, metadata: bytes | None
    ) -> None:
        """``job``'s finishing write chained (``result.chained``): the task goes on with the
        next waiting message, so this run's waiters are done (told ``NEXT`` with ``status``,
        the task's artifacts and ``metadata``), and a next run the store handed back
        (``result.next_run``) is queued in this process."""
        event = TaskEvent(NEXT, job.seq, status, result.artifacts_json, metadata)
        self.events.notify_local(job.task_id, event)
        if result.next_run is not None and self.queue_here is not None:
            self.queue_here(RunJob.queued_here(*result.next_run))
