"""The scripts of a context and its tasks outside runs: a task canceled (``CANCEL``), a
context scrubbed (``SCRUB``), and a task read with the last event it includes
(``SNAPSHOT``, for the event log's readers); each with its arguments and reply parser."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.store import fields as f
from gateway.store.lua.contract import ScriptArgs, as_bytes, lua_value, pushed, text
from gateway.store.lua.prelude import PRELUDE

__all__ = [
    "CANCEL",
    "SCRUB",
    "SNAPSHOT",
    "SNAPSHOT_FIELDS",
    "CancelArgs",
    "CancelReply",
    "ScrubArgs",
    "ScrubReply",
    "SnapshotArgs",
    "SnapshotReply",
    "cancel_reply",
    "scrub_reply",
    "snapshot_reply",
]

# ARGV: CancelArgs. Reply: ``cancel_reply``.
# Messages waiting for the task's run are dropped with it (they stay in its history).


@dataclass(slots=True)
class CancelArgs(ScriptArgs):
    """The cancel script's ARGV, in order."""

    cid: str
    tid: str
    status: bytes  # json
    now: int  # ms
    ttl: int  # ms


CANCEL = (
    PRELUDE
    + CancelArgs.lua()
    + """
if redis.call('EXISTS', META) == 0 then return {'notask'} end
local state
state, LOGGED = unpack(redis.call('HMGET', TASKS, tid .. F_STATE, tid .. F_LOGGED))
if not state then return {'notask'} end
if TERMINAL[state] then return {'terminal', state} end
redis.call('HSET', TASKS, tid .. F_STATE, CANCELED, tid .. F_STATUS, status)
emit(tid, EV_STATUS, status, tonumber(ttl), true)
drop_waiting(tid)
settled(tid)
notify(cid, tid, D_STATUS, CANCELED, now, tonumber(ttl))
redis.call('HSET', META, M_UPDATED, now)
redis.call('ZADD', CONTEXTS, now, cid)
touch(tonumber(ttl), CONTEXTS)
redis.call('PUBLISH', STOPS .. tid, CANCELED)
return {'ok', PUSHED}
"""
)


@dataclass(frozen=True, slots=True)
class CancelReply:
    outcome: str  # 'ok', 'notask' or 'terminal'
    state: str | None = None  # a terminal task's state
    pushed: bool = False  # a cluster: webhook deliveries wait in the context's slot


def cancel_reply(reply: list[Any]) -> CancelReply:
    outcome = text(reply[0])
    if outcome == "ok":
        return CancelReply(outcome, None, pushed(reply, 1))
    return CancelReply(outcome, text(reply[1]) if len(reply) > 1 else None)


# ARGV: ScrubArgs.
# Deletes every key of the context and its entries in the user's indexes, drops its queued
# jobs, and tells runners of unfinished tasks to stop. With a forget job, the ids in the
# context's ledger go to the outbox as one 'forget' job, queued even when the ledger is empty
# (it also sweeps the context's session in Cortadel); on a cluster the ids are returned for
# the caller to queue the job.
# Reply: ``scrub_reply`` (its counts are the scrub's receipt, for the audit trail).


@dataclass(slots=True)
class ScrubArgs(ScriptArgs):
    """The scrub script's ARGV, in order."""

    cid: str
    forget_job: bytes  # long-term memory job json, or '' to leave Cortadel's memories alone
    ttl: int  # ms: how long the context's id stays unknown (its tombstone lives)


SCRUB = (
    PRELUDE
    + ScrubArgs.lua()
    + """
if redis.call('EXISTS', META) == 0 then return {0} end
local forget = {}
if forget_job ~= '' then forget = redis.call('SMEMBERS', LEDGER) end
-- The receipt: what is about to go (a vector is one uint32 seq in VECTOR_SEQS).
local receipt = {1, redis.call('HLEN', MSGS), redis.call('LLEN', ITEMS),
                 math.floor(redis.call('STRLEN', VECTOR_SEQS) / 4), 0, #forget}
if forget_job ~= '' and OUTBOX then
  redis.call('XADD', OUTBOX, '*', E_JOB, forget_job, E_FORGET, table.concat(forget, ','))
  forget = {}
end
local origin = redis.call('HGET', META, M_ORIGIN)
if origin and redis.call('HGET', ORIGINS, origin) == cid then
  redis.call('HDEL', ORIGINS, origin)
end
local tids = redis.call('LRANGE', ITEMS, 0, -1)
for i = 1, #tids do
  redis.call('HDEL', TASK_INDEX, tids[i])
  settled(tids[i])
  redis.call('UNLINK', META .. EVENT_STREAM .. tids[i])
  local state = redis.call('HGET', TASKS, tids[i] .. F_STATE)
  if state and not TERMINAL[state] then
    redis.call('PUBLISH', STOPS .. tids[i], CANCELED)
  end
  local job = redis.call('HGET', TASKS, tids[i] .. F_JOB)
  if job then ack(job) end
  if state and not TERMINAL[state] then  -- its run (and any message waiting) is dropped
    local waiting = redis.call('HGET', TASKS, tids[i] .. F_WAITING)
    local _, queued = string.gsub(waiting or '', '[^,]+', '')
    receipt[5] = receipt[5] + (job and 1 or 0) + queued
  end
end
-- UNLINK: the memory of large values (vectors, long histories) is freed off the main thread.
redis.call('UNLINK', META, ITEMS, TASKS, MSGS, MIDS, VECTORS, VECTOR_SEQS, VECTOR_BITS,
           SEEN, LEDGER)
-- deliveries a cluster had not moved to the stream yet (counted with the dropped jobs)
receipt[5] = receipt[5] + redis.call('ZCARD', PUSH_PENDING)
redis.call('UNLINK', PUSH_PENDING)
redis.call('ZREM', CONTEXTS, cid)
-- The tombstone: a send naming this id finds no context for the retention period.
redis.call('SET', CONTEXTS .. GONE .. redis.sha1hex(cid), '1', 'PX', ttl)
for i = 1, #forget do receipt[#receipt + 1] = forget[i] end
return receipt
"""
)


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
    return ScrubReply((messages, tasks, vectors, jobs, memories), as_bytes(reply[6:]))


# The task fields the snapshot script reads, in the order of ``SnapshotReply``'s fields.
SNAPSHOT_FIELDS = (
    f.STATUS,
    f.ARTIFACTS,
    f.MESSAGES,
    f.METADATA,
    f.AGENT_METADATA,
    f.OPEN_ARTIFACT,
)


@dataclass(slots=True)
class SnapshotArgs(ScriptArgs):
    """The snapshot script's ARGV, in order."""

    logged: str  # the task's LOGGED field
    fields: Sequence[str]  # the task's fields to read (``SNAPSHOT_FIELDS``, status first)


# KEYS: 1 the context's tasks hash 2 the task's event stream. ARGV: SnapshotArgs.
# A task as it stands and the id of the last event it includes, read at one instant: events
# after that id are news to a reader that starts from this snapshot. A task is logged from
# its first reader on: the snapshot marks it (a task that exists: the status is the first
# field read), and every change written after it goes to the log. Reply:
# ``snapshot_reply``.
SNAPSHOT = (
    f"local NO_EVENT = {lua_value(f.NO_EVENT)}\n"
    + SnapshotArgs.lua()
    + """
local TASKS, EVENTS_KEY = KEYS[1], KEYS[2]
local last = redis.call('XREVRANGE', EVENTS_KEY, '+', '-', 'COUNT', 1)
local id = NO_EVENT
if last[1] then id = last[1][1] end
local task = redis.call('HMGET', TASKS, unpack(ARGV, fields_from))
if task[1] then redis.call('HSET', TASKS, logged, 1) end
return {id, unpack(task)}
"""
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
        text(last), status, artifacts, messages, metadata, agent_metadata, open_artifact
    )
