"""The replies of the store's scripts (``scripts.py``), each parsed once into a typed value:
one parser per script whose reply is not a scalar, so no caller reads a reply by index (a
scalar reply, a count or a flag, is read with ``int``/``bool`` where it is used; its meaning
is written above its script). Values stay as Redis gave them (sealed content is opened by the
store)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gateway.store import fields as f
from gateway.store.assembly import text_of as _text

__all__ = [
    "SNAPSHOT_FIELDS",
    "BeginRunReply",
    "CancelReply",
    "ForgetDeadReply",
    "PushConfigOutcome",
    "ScrubReply",
    "SendAccepted",
    "SendDuplicate",
    "SendOrigin",
    "SendRefused",
    "SendReply",
    "SendWaiting",
    "SnapshotReply",
    "UpdateReply",
    "begin_run_reply",
    "cancel_reply",
    "forget_dead_reply",
    "push_config_reply",
    "remember_reply",
    "scrub_reply",
    "send_reply",
    "snapshot_reply",
    "take_pushes_reply",
    "update_reply",
]


@dataclass(frozen=True, slots=True)
class SendAccepted:
    """The message is stored and its run starts now."""

    task_id: str
    seq: int
    referenced: list[Any]  # per reference id: its status and artifacts (sealed)
    entry: str  # the run's job on the stream, or ''
    claimed: tuple[str, dict[bytes, bytes]] | None  # the job the claimant took
    superseded: str  # the job of the run it superseded (a cluster acknowledges it), or ''
    pushed: bool  # a cluster: webhook deliveries wait in the context's slot to be moved
    embed_entry: str = ""  # the message's embedding job on the stream, or ''


@dataclass(frozen=True, slots=True)
class SendWaiting:
    """The message is stored; its run is queued when the runs before it settle."""

    task_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class SendDuplicate:
    """The messageId was stored before, as ``seq`` of ``task_id`` with ``digest``."""

    task_id: str
    digest: str
    seq: int


@dataclass(frozen=True, slots=True)
class SendOrigin:
    """The messageId opened another context before: ``context_id``."""

    context_id: str


@dataclass(frozen=True, slots=True)
class SendRefused:
    """Nothing was stored: ``kind`` says why ('nocontext', 'quota', ...), ``detail`` with
    what."""

    kind: str
    detail: list[str]


SendReply = SendAccepted | SendWaiting | SendDuplicate | SendOrigin | SendRefused


def _pushed(reply: list[Any], at: int) -> bool:
    """Whether the script's reply says 'push' at ``at``: on a cluster, deliveries it queued
    wait in the context's slot for the store to move them to the push stream."""
    return len(reply) > at and _text(reply[at]) == "push"


def send_reply(reply: list[Any]) -> SendReply:
    kind = _text(reply[0])
    if kind == "ok":
        raw = reply[6]
        claimed = None
        if _text(reply[5]):
            claimed = (_text(reply[5]), {raw[i]: raw[i + 1] for i in range(0, len(raw), 2)})
        return SendAccepted(
            _text(reply[1]),
            int(reply[2]),
            reply[3],
            _text(reply[4]),
            claimed,
            _text(reply[7]),
            _pushed(reply, 8),
            _text(reply[9]),
        )
    if kind == "wait":
        return SendWaiting(_text(reply[1]), int(reply[2]))
    if kind == "dup":
        return SendDuplicate(_text(reply[1]), _text(reply[2]), int(reply[3]))
    if kind == "origin":
        return SendOrigin(_text(reply[1]))
    return SendRefused(kind, [_text(r) for r in reply[1:]])


@dataclass(frozen=True, slots=True)
class UpdateReply:
    outcome: str  # 'ok', 'gone', 'terminal', 'skipped', 'fenced' or 'moot'
    artifacts: bytes | None = None  # with a write that ends the run or settles the task
    store_turn: bool = False  # a cluster: the caller queues the turn in the outbox
    chained: bool = False  # the run settled while messages waited: the next one is queued
    # The next waiting message's run (seq, job fields) when the caller queues it itself.
    next_run: tuple[int, bytes] | None = None
    pushed: bool = False  # a cluster: webhook deliveries wait in the context's slot
    embedded: bool = False  # the run's message's vector was added: its embedding job is done


def update_reply(reply: list[Any]) -> UpdateReply:
    outcome, embedded = _text(reply[0]), _text(reply[1]) == "1"
    if outcome != "ok":
        return UpdateReply(outcome, embedded=embedded)
    next_run = (int(reply[6]), reply[5]) if reply[6] else None
    store_turn, chained = _text(reply[3]) == "store", _text(reply[4]) == "1"
    return UpdateReply(
        outcome, reply[2], store_turn, chained, next_run, _pushed(reply, 7), embedded
    )


@dataclass(frozen=True, slots=True)
class BeginRunReply:
    """A run's start: its message and referenced tasks (sealed), the context's last seq and
    the seqs still waiting for the task; or, ``moot``, nothing to run (with, on a cluster,
    ``lost``: the next waiting message's run whose job the caller queues now)."""

    moot: bool
    message: bytes | None = None
    referenced: list[Any] | None = None
    last: int = 0
    waiting: frozenset[int] = frozenset()
    lost: tuple[int, bytes] | None = None


def begin_run_reply(reply: list[Any]) -> BeginRunReply:
    if _text(reply[0]) != "ok":
        lost = (int(reply[1]), reply[2]) if len(reply) > 2 else None
        return BeginRunReply(moot=True, lost=lost)
    waiting = frozenset(int(s) for s in _text(reply[4]).split(",") if s)
    return BeginRunReply(False, reply[1], reply[2], int(reply[3]), waiting)


@dataclass(frozen=True, slots=True)
class CancelReply:
    outcome: str  # 'ok', 'notask' or 'terminal'
    state: str | None = None  # a terminal task's state
    pushed: bool = False  # a cluster: webhook deliveries wait in the context's slot


def cancel_reply(reply: list[Any]) -> CancelReply:
    outcome = _text(reply[0])
    if outcome == "ok":
        return CancelReply(outcome, None, _pushed(reply, 1))
    return CancelReply(outcome, _text(reply[1]) if len(reply) > 1 else None)


@dataclass(frozen=True, slots=True)
class ScrubReply:
    """What a scrub removed (messages, tasks, vectors, dropped runs and waiting messages,
    memories to forget) and the memory ids a cluster's caller still queues for deletion."""

    counts: tuple[int, int, int, int, int]
    forget: list[bytes]


def scrub_reply(reply: list[Any]) -> ScrubReply | None:
    if not int(reply[0]):
        return None
    messages, tasks, vectors, jobs, memories = (int(n) for n in reply[1:6])
    forget = [r if isinstance(r, bytes) else str(r).encode() for r in reply[6:]]
    return ScrubReply((messages, tasks, vectors, jobs, memories), forget)


@dataclass(frozen=True, slots=True)
class ForgetDeadReply:
    """One chunk of dead letters looked at: how many were deleted, how many read, and the
    id of the last one read ('' when none was)."""

    deleted: int
    read: int
    last: str


def forget_dead_reply(reply: list[Any]) -> ForgetDeadReply:
    return ForgetDeadReply(int(reply[0]), int(reply[1]), _text(reply[2]))


PushConfigOutcome = Literal["ok", "notask", "full"]


def push_config_reply(reply: list[Any]) -> PushConfigOutcome:
    """'ok', 'notask' (no such task, or its context is gone) or 'full' (the task has the
    most configs it may have)."""
    outcome = _text(reply[0])
    if outcome not in ("ok", "notask", "full"):
        raise ValueError(f"unexpected push-config reply: {outcome!r}")
    return outcome  # type: ignore[return-value]


# The task fields the snapshot script reads, in the order of ``SnapshotReply``'s fields.
SNAPSHOT_FIELDS = (
    f.STATUS,
    f.ARTIFACTS,
    f.MESSAGES,
    f.METADATA,
    f.AGENT_METADATA,
    f.OPEN_ARTIFACT,
)


@dataclass(frozen=True, slots=True)
class SnapshotReply:
    """A task as it stands (its stored fields, sealed; ``status`` None: no such task) and
    the id of the last event it includes (``fields.NO_EVENT`` when none), read at one instant."""

    last_event: str
    status: bytes | None
    artifacts: bytes | None
    messages: bytes | None
    metadata: bytes | None
    agent_metadata: bytes | None
    open_artifact: bytes | None


def snapshot_reply(reply: list[Any]) -> SnapshotReply:
    last, status, artifacts, messages, metadata, agent_metadata, open_artifact = reply
    return SnapshotReply(
        _text(last), status, artifacts, messages, metadata, agent_metadata, open_artifact
    )


def take_pushes_reply(reply: list[Any]) -> list[bytes]:
    """The deliveries taken (their json), to be moved to the push stream."""
    return [r if isinstance(r, bytes) else str(r).encode() for r in reply]


def remember_reply(reply: list[Any]) -> set[str]:
    """The ids not recalled into the context before."""
    return {_text(i) for i in reply}
