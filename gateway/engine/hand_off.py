"""The run hand-off: ``RunHandOff.send`` stores an accepted message and takes its run from
the send to a worker, in one call.

A send reserves a worker of this process before it writes; the write says how the run is
queued (``Queueing``: on the jobs stream or by this process's queue, the reserved worker's
consumer name, the run policy), and the send script may take the next job of the stream for
that worker in the same step (usually the message's own, sometimes an older one). The
store's answer settles the reservation: the job taken here starts, or the worker is given
back. ``RunHandOff.policy`` chooses the run policy of a message: what it does when its
task's run is under way (``enqueue``, ``reject`` or ``interrupt``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from gateway.agents.base import Agent
from gateway.engine.runs import LOCAL, JobQueue, RunJob, attempt_id
from gateway.errors import InvalidParamsError
from gateway.principal import Principal
from gateway.store.redis_store import (
    OnBusy,
    Queueing,
    RunQueue,
    SendWrite,
    Store,
    StoredSend,
)

__all__ = ["RUN_POLICY_KEY", "RunHandOff", "RunPolicy", "SendResult"]

# What a message that continues a task whose run is under way does: wait for that run to
# settle, be refused, or supersede it.
RunPolicy = Literal["enqueue", "reject", "interrupt"]
_POLICIES: tuple[str, ...] = get_args(RunPolicy)
_ON_BUSY: dict[RunPolicy, OnBusy] = {
    "enqueue": OnBusy.WAIT,
    "reject": OnBusy.REFUSE,
    "interrupt": OnBusy.SUPERSEDE,
}

# The key of a message's metadata that chooses the run policy for that message.
RUN_POLICY_KEY = "runPolicy"


@dataclass(frozen=True, slots=True)
class SendResult:
    """An accepted message as the hand-off leaves it."""

    context_id: str
    task_id: str
    seq: int
    duplicate: bool  # a replayed messageId: the message stored before
    waiting: bool  # stored; its run is queued when the runs before it settle
    # The message's run is this process's: its outcome reaches this process's waiters
    # without Redis (``TaskEvents.notify_local``).
    here: bool


class _Reservation:
    """A worker of this process held for the run a send may take at once (``consumer``, ''
    for none), given back on leaving unless the run took it (a class, not a generator's
    context manager: one is entered on every send)."""

    __slots__ = ("_queue", "consumer")

    def __init__(self, queue: JobQueue) -> None:
        self._queue = queue
        self.consumer = queue.claimant()

    def __enter__(self) -> _Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.consumer:
            self._queue.release()


class RunHandOff:
    """Where the service hands an accepted message: chooses its run policy, and stores it
    with its run queued (``send``). ``default_policy``: the server's run policy
    (``GATEWAY_RUN_POLICY``)."""

    def __init__(
        self, store: Store, queue: JobQueue, default_policy: RunPolicy = "enqueue"
    ) -> None:
        self.store = store
        self.queue = queue
        self.default_policy: RunPolicy = default_policy

    def policy(self, agent: Agent, metadata: dict[str, Any] | None) -> RunPolicy:
        """What a message for ``agent`` does when its task's run is under way: the message's
        own choice (``metadata.runPolicy``), else its agent's (a registry entry's
        ``runPolicy``), else the server's. An unknown choice is the client's error."""
        chosen = (metadata or {}).get(RUN_POLICY_KEY)
        if chosen is None:
            chosen = getattr(agent, "run_policy", None) or self.default_policy
        if chosen not in _POLICIES:
            raise InvalidParamsError(
                f"message.metadata.{RUN_POLICY_KEY} must be one of: {', '.join(_POLICIES)}"
            )
        policy: RunPolicy = chosen
        return policy

    async def send(
        self, principal: Principal, write: SendWrite, job: RunJob, policy: RunPolicy
    ) -> SendResult:
        """Store ``write`` (its ``queueing`` set here) with its run queued under ``policy``,
        and hand the run over (``job``: its ids as the write names them; the store's answer
        fixes them and the message's seq). A worker of this process is reserved for the
        write's duration, so the send script may give it a job at once."""
        with _Reservation(self.queue) as slot:
            queued = write.queued(self._queueing(slot, policy))
            stored = await self.store.send(principal, queued)
            here = await self._accepted(slot, job, stored)
        return SendResult(
            stored.context_id, stored.task_id, stored.seq, stored.duplicate, stored.waiting, here
        )

    def _queueing(self, slot: _Reservation, policy: RunPolicy) -> Queueing:
        """How the send's run is queued: on the jobs stream (taken at once by ``slot``'s
        worker when it has one) or by this process's queue, and what the message does when
        its task's run is under way (``policy``)."""
        where = RunQueue.STREAM if self.queue.durable else RunQueue.LOCAL
        return Queueing(where, slot.consumer, _ON_BUSY[policy])

    async def _accepted(self, slot: _Reservation, job: RunJob, result: StoredSend) -> bool:
        """Hand over the run of a stored message. A replayed message or one waiting for the
        task's run has none yet. True when the message's run is this process's."""
        if result.duplicate or result.waiting:
            return False
        if not self.queue.durable:
            await self.queue.enqueue(job.accepted(result, attempt_id(LOCAL, result.seq)))
            return True
        if result.claimed is None:
            return False  # queued on the stream, for whichever worker reads it
        consumer, slot.consumer = slot.consumer, ""
        entry, fields = result.claimed
        if entry == result.entry:  # its own job: started with the inputs the send returned
            await self.queue.enqueue(job.accepted(result, attempt_id(consumer, entry), entry))
            return True
        self.queue.adopt(entry, fields)
        return False
