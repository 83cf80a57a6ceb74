"""A run of an agent as a job (``RunJob``), who may write its outcome (``attempt_id``), and
the queue jobs go to (``JobQueue``).

Who may write a run's outcome is its attempt id, built by ``attempt_id`` only (the send
script fences the runs it hands over with the same format, in one Lua function naming this
one). Runs reach a queue through the run hand-off (``hand_off.py``) when a message is sent,
and through ``next_run.py`` when a run ends while later messages wait for its task.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from gateway.store.fields import ENTRY_JOB, ENTRY_SEQ
from gateway.store.redis_store import RunInputs, StoredSend

__all__ = ["LOCAL", "JobQueue", "RunJob", "attempt_id"]

_JOB, _SEQ = ENTRY_JOB.encode(), ENTRY_SEQ.encode()  # a job stream entry's fields

# The owner of a run queued in this process's queue (not the jobs stream).
LOCAL = "local"


def attempt_id(owner: str, job: str | int) -> str:
    """The attempt that may write a run: the consumer that took stream entry ``job``, or
    ``LOCAL`` and the message's seq for a run of the in-process queue. The send script
    (``store/lua/prelude.py``) builds the same for the runs it fences."""
    return f"{owner}/{job}"


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
    output_modes: Sequence[str] = ()  # the client's acceptedOutputModes
    registered: bool = False  # the agent is in the registry (shared by every worker)
    # Handed over by the send that created the job, so the run needs no read. A queue
    # that serialises jobs drops it; the run then loads its inputs itself.
    inputs: RunInputs | None = field(default=None, compare=False)
    # Set by the stream queue: the entry to acknowledge, and the attempt that may write.
    entry: str = ""
    attempt: str = ""
    attempts: int = 1
    # The W3C traceparent of the span that queued the run (empty when tracing is off):
    # the run's span continues that trace on whichever replica takes the job.
    trace: str = ""

    def wire(self) -> bytes:
        """The job's fields as stored in the stream (``seq`` is added by the send script)."""
        fields: dict[str, Any] = {
            "t": self.tenant,
            "u": self.user,
            "a": self.agent_id,
            "c": self.context_id,
            "k": self.task_id,
            "r": list(self.reference_ids),
        }
        if self.output_modes:
            fields["o"] = list(self.output_modes)
        if self.registered:
            fields["g"] = 1
        if self.trace:
            fields["tp"] = self.trace
        return orjson.dumps(fields)

    @classmethod
    def from_wire(cls, fields: dict[bytes, bytes], entry: str) -> RunJob:
        raw: dict[str, Any] = orjson.loads(fields[_JOB])
        return cls(
            tenant=raw["t"],
            user=raw["u"],
            agent_id=raw["a"],
            context_id=raw["c"],
            task_id=raw["k"],
            seq=int(fields[_SEQ]),
            reference_ids=tuple(raw["r"]),
            output_modes=tuple(raw.get("o") or ()),
            registered=bool(raw.get("g")),
            entry=entry,
            attempts=int(fields.get(b"n", b"1")),
            trace=str(raw.get("tp") or ""),
        )

    def taken_by(self, consumer: str, entry: str) -> RunJob:
        """The job as stream entry ``entry``, taken by ``consumer``."""
        return replace(self, entry=entry, attempt=attempt_id(consumer, entry))

    @property
    def local(self) -> bool:
        """Whether this process's queue runs the job (not the jobs stream)."""
        return self.attempt == attempt_id(LOCAL, self.seq)

    def run_here(self) -> RunJob:
        """The job as queued in this process: fenced by the attempt the send script wrote."""
        return replace(self, attempt=attempt_id(LOCAL, self.seq))

    def accepted(self, result: StoredSend, attempt: str, entry: str = "") -> RunJob:
        """The job of an accepted message, with the ids, seq and inputs the store gave it,
        run here as ``attempt`` (of stream entry ``entry``, '' in this process's queue)."""
        # Built field by field (``dataclasses.replace`` costs twice as much: one per send).
        return RunJob(
            tenant=self.tenant,
            user=self.user,
            agent_id=self.agent_id,
            context_id=result.context_id,
            task_id=result.task_id,
            seq=result.seq,
            reference_ids=self.reference_ids,
            output_modes=self.output_modes,
            registered=self.registered,
            inputs=result.inputs,
            entry=entry,
            attempt=attempt,
            attempts=self.attempts,
            trace=self.trace,
        )

    @classmethod
    def queued_here(cls, seq: int, job_json: bytes) -> RunJob:
        """The job of message ``seq`` (its fields ``job_json``), queued in this process."""
        return cls.from_wire({_JOB: job_json, _SEQ: str(seq).encode()}, "").run_here()


class JobQueue(Protocol):
    """Where accepted runs go. A durable queue has the send script write the job together
    with the message; a process with a free worker may take a job in that same step
    (``claimant``), and then runs it here (``enqueue`` / ``adopt``)."""

    durable: bool

    def claimant(self) -> str:
        """A consumer name that may take one job at send time ('' when none may); each
        non-empty answer is settled by exactly one ``enqueue``, ``adopt`` or ``release``."""
        ...

    def release(self) -> None: ...

    def adopt(self, entry: str, fields: dict[bytes, bytes]) -> None:
        """Run a job that a claimant took at send time (another message's)."""
        ...

    async def enqueue(self, job: RunJob) -> None: ...

    async def start(self) -> None: ...

    async def stop(self, grace_seconds: float) -> None: ...
