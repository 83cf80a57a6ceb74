"""The scripts that start a run: ``BEGIN_RUN`` (the run fenced, its inputs read, or found
moot) with ``begin_run_reply``, and ``RECORD_JOB`` (a cluster records a queued job's entry
on its task)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.store.lua.contract import CONSTANTS, ScriptArgs, text
from gateway.store.lua.prelude import PRELUDE

__all__ = [
    "BEGIN_RUN",
    "RECORD_JOB",
    "BeginRunArgs",
    "BeginRunReply",
    "RecordJobArgs",
    "begin_run_reply",
]

# ARGV: BeginRunArgs.
# Starts a run of the message at `seq`, or finds it moot: the task is gone, terminal or
# already ran that message (the job is then acknowledged). On a cluster a moot run may name
# the next waiting message's run: the run before it settled but its process died before
# queueing that job, which the caller queues now. Reply: ``begin_run_reply``.
# With an attempt id, the run is fenced: writes of any earlier attempt (a worker that died
# or stalled mid-run) are rolled back to where that attempt began (messages that arrived
# since and wait for the task are kept), and only this attempt may write from now on.


@dataclass(slots=True)
class BeginRunArgs(ScriptArgs):
    """The begin-run script's ARGV, in order."""

    tid: str
    seq: int
    att: str  # the attempt id, or ''
    entry: str  # the job entry, or ''
    refs: Sequence[str]  # the reference ids (the rest of ARGV)


BEGIN_RUN = (
    PRELUDE
    + BeginRunArgs.lua()
    + """
seq = tonumber(seq)
if redis.call('EXISTS', META) == 0 then ack(entry); return {'moot'} end
local state = redis.call('HGET', TASKS, tid .. F_STATE)
local ran = tonumber(redis.call('HGET', TASKS, tid .. F_RAN) or '0')
if not state or TERMINAL[state] then ack(entry); return {'moot'} end
local job = redis.call('HGET', TASKS, tid .. F_JOB) or ''
if ran >= seq then
  ack(entry)
  if not JOBS and string.sub(job, 1, #PENDING_MARK) == PENDING_MARK then
    local n = string.sub(job, #PENDING_MARK + 1)
    local lost = redis.call('HGET', TASKS, tid .. F_WAITING_JOB .. n)
    if lost and tonumber(n) > ran then return {'moot', n, lost} end
  end
  return {'moot'}
end
if entry ~= '' and job == PENDING_MARK .. seq then
  redis.call('HSET', TASKS, tid .. F_JOB, entry)
end
redis.call('HDEL', TASKS, tid .. F_WAITING_JOB .. seq)
if att ~= '' then
  local prev = redis.call('HGET', TASKS, tid .. F_ATTEMPT)
  local mark = redis.call('HGET', TASKS, tid .. F_MARK)
  if prev and prev ~= att and mark then
    redis.call('HDEL', TASKS, tid .. F_OPEN_ARTIFACT)
    local sep = string.find(mark, '|', 1, true)
    local alen, mlen = tonumber(string.sub(mark, 1, sep - 1)), tonumber(string.sub(mark, sep + 1))
    -- Lengths first (HSTRLEN): the values are read only when there is something to cut.
    if redis.call('HSTRLEN', TASKS, tid .. F_ARTIFACTS) > alen then
      local arts = redis.call('HGET', TASKS, tid .. F_ARTIFACTS)
      if alen <= 2 then arts = '[]' else arts = string.sub(arts, 1, alen - 1) .. ']' end
      redis.call('HSET', TASKS, tid .. F_ARTIFACTS, arts)
    end
    if redis.call('HSTRLEN', TASKS, tid .. F_MESSAGES) > mlen then
      local seqs = redis.call('HGET', TASKS, tid .. F_MESSAGES)
      local waiting = {}
      for s in string.gmatch(redis.call('HGET', TASKS, tid .. F_WAITING) or '', '[^,]+') do
        waiting[s] = true
      end
      local kept = string.sub(seqs, 1, mlen)
      for s in string.gmatch(string.sub(seqs, mlen + 2), '[^,]+') do
        if waiting[s] then kept = kept .. ',' .. s else redis.call('HDEL', MSGS, s) end
      end
      redis.call('HSET', TASKS, tid .. F_MESSAGES, kept)
    end
  end
  if prev ~= att then fence(tid, att) end
end
local msg, referenced = run_inputs(seq, refs_from)
return {'ok', msg, referenced, redis.call('HGET', META, M_SEQ),
        redis.call('HGET', TASKS, tid .. F_WAITING) or ''}
"""
)


# KEYS: 1 the context's tasks hash. ARGV: RecordJobArgs.
# Cluster mode: records a queued job's entry in place of the task's 'pending:<seq>' mark,
# unless its run has begun (and recorded it) or settled meanwhile.


@dataclass(slots=True)
class RecordJobArgs(ScriptArgs):
    """The record-job script's ARGV, in order."""

    tid: str
    seq: int
    entry: str


RECORD_JOB = (
    CONSTANTS
    + RecordJobArgs.lua()
    + """
local TASKS = KEYS[1]
if redis.call('HGET', TASKS, tid .. F_JOB) == PENDING_MARK .. seq then
  redis.call('HSET', TASKS, tid .. F_JOB, entry)
end
return 1
"""
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
    if text(reply[0]) != "ok":
        lost = (int(reply[1]), reply[2]) if len(reply) > 2 else None
        return BeginRunReply(moot=True, lost=lost)
    waiting = frozenset(int(s) for s in text(reply[4]).split(",") if s)
    return BeginRunReply(False, reply[1], reply[2], int(reply[3]), waiting)
