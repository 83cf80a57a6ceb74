"""The update script: one write of a run's progress to its task (``UPDATE``), with
``UpdateArgs`` and ``update_reply``.

The script is four parts run as one: the task read and the write refused when it is moot,
fenced or skipped, the run's outputs written, a finishing write settling the run (and
queueing the next waiting message's), then the change told: webhooks, the task's event
stream and its channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.store.lua.contract import ScriptArgs, pushed, text
from gateway.store.lua.prelude import PRELUDE

__all__ = ["UPDATE", "UpdateArgs", "UpdateReply", "update_reply"]

# ARGV: UpdateArgs. A finishing write that leaves the task completed or input-required,
# given an outbox job, queues the turn in the outbox (on a cluster it returns 'store' instead).
# Events are published as '<state>|<seq>', so a waiter can tell this run's news from an
# earlier run's of the same task. A finishing write while messages wait for the task does not
# settle it: the run's artifacts and reply are stored, the next message's run is queued, the
# task goes back to 'submitted' and the event is 'next|<seq>'.
# Reply: ``update_reply`` (artifacts only with a write that ends the run or leaves
# the task terminal or interrupted). Terminal tasks take no writes: a late result after a
# cancel is dropped. A finishing write records the run as
# done and acknowledges its job in the same step, so a crash can neither lose nor repeat it.


@dataclass(slots=True)
class UpdateArgs(ScriptArgs):
    """The update script's ARGV, in order."""

    cid: str
    tid: str
    new_state: str  # '' = unchanged
    status: bytes  # json
    artifacts: bytes  # json objects joined by ',', or ''
    reply: bytes  # the agent's message json, or ''
    now: int  # ms
    ttl: int  # ms
    required_state: str  # or ''
    attempt: str  # or ''
    finish: str  # '1' | '0'
    run_seq: int  # the seq of the run's message
    entry: str  # the run's job entry, or ''
    outbox_job: bytes  # long-term memory job json, or ''
    agent_metadata: bytes  # the agent's task metadata json, or ''
    next_queue: str  # how the next waiting message's run is queued: 'r' or 'l'
    next_status: bytes  # the status json of a task whose next run is queued
    artifact_events: bytes  # '<length>:<json>'... or ''
    open_artifact: bytes  # json, '' unchanged, '-' none (closed)
    artifact_ids: bytes  # one per line, when webhooks get artifact updates, else ''


# The task read in one HMGET; a write to a context or task gone, to a terminal task, fenced
# or past the run is refused.
_READ = """
finish, ttl = finish == '1', tonumber(ttl)
if redis.call('EXISTS', META) == 0 then ack(entry); return {'gone'} end
-- Every reply from here on: the meta fields this write set go in one HSET first.
local function answer(reply) flush_meta(); return reply end
-- The artifacts are read only to append to them, or to return them with a write that
-- settles the task or ends its run (a progress or 'working' write returns none). The task's
-- fields this write reads come in one HMGET: its state, run and webhooks, then what it
-- changes (at the indexes `at`).
local returns_arts = finish or TERMINAL[new_state] or INTERRUPTED[new_state]
local fields, at = {tid .. F_STATE, tid .. F_RAN, tid .. F_ATTEMPT, tid .. F_PUSH_IDS,
                   tid .. F_LOGGED}, {}
local function also(name, wanted)
  if wanted then fields[#fields + 1] = tid .. name; at[name] = #fields end
end
also(F_MESSAGES, reply ~= '')
also(F_ARTIFACTS, artifacts ~= '' or returns_arts)
also(F_WAITING, finish)
local read = redis.call('HMGET', TASKS, unpack(fields))
local state, ran, owner, push_ids = read[1], read[2], read[3], read[4]
LOGGED = read[5]
local function field(name) return at[name] and read[at[name]] end
if not state then ack(entry); return answer({'gone'}) end
if TERMINAL[state] then
  if finish then ack(entry); settled(tid) end
  return answer({'terminal'})
end
if finish and tonumber(ran or '0') >= tonumber(run_seq) then
  ack(entry)
  return answer({'moot'})
end
if attempt ~= '' and owner ~= attempt then return answer({'fenced'}) end
if required_state ~= '' and state ~= required_state then return answer({'skipped'}) end
if #artifacts + #reply > 0 then  -- the bytes quota counts replies and artifacts too
  if not META_SEQ then
    META_SEQ, META_BYTES = unpack(redis.call('HMGET', META, M_SEQ, M_BYTES))
  end
  META_BYTES = tonumber(META_BYTES or '0') + #artifacts + #reply
  set_meta(M_BYTES, META_BYTES)
end
"""
# The run's outputs: its reply, artifacts, state and metadata.
_WRITE = """
-- The task's fields this write sets, set in one HSET once the run's outputs are in.
local sets = {}
local function set(name, value) sets[#sets + 1], sets[#sets + 2] = tid .. name, value end
if reply ~= '' then
  META_SEQ = tonumber(META_SEQ or '0') + 1
  set_meta(M_SEQ, META_SEQ)
  redis.call('HSET', MSGS, META_SEQ, reply)
  set(F_MESSAGES, field(F_MESSAGES) .. ',' .. META_SEQ)
end
local arts = field(F_ARTIFACTS)
if artifact_ids ~= '' and push_ids then
  for aid in string.gmatch(artifact_ids, '[^\\n]+') do
    notify(cid, tid, D_ARTIFACT, '', now, tonumber(ttl), aid, push_ids)
  end
end
if artifacts ~= '' then
  if arts == '[]' then arts = '[' .. artifacts .. ']'
  else arts = string.sub(arts, 1, -2) .. ',' .. artifacts .. ']' end
  set(F_ARTIFACTS, arts)
end
if new_state ~= '' then set(F_STATE, new_state); set(F_STATUS, status) end
if agent_metadata ~= '' then set(F_AGENT_METADATA, agent_metadata) end
if open_artifact == '-' then redis.call('HDEL', TASKS, tid .. F_OPEN_ARTIFACT)
elseif open_artifact ~= '' then set(F_OPEN_ARTIFACT, open_artifact) end
if artifact_events ~= '' then emit_artifacts(tid, artifact_events, tonumber(ttl)) end
if finish then set(F_RAN, run_seq) end
if #sets > 0 then redis.call('HSET', TASKS, unpack(sets)) end
"""
# A finishing write: the run is done, its turn queued for long-term memory, and the next
# waiting message's run queued (or the task settled).
_FINISH = """
local store, chained, nextjob, nextseq = '', '', '', ''
if finish then
  redis.call('HDEL', TASKS, tid .. F_ATTEMPT, tid .. F_MARK, tid .. F_JOB)
  ack(entry)
  local ended = new_state
  if ended == '' then ended = state end
  if outbox_job ~= '' and (ended == COMPLETED or ended == INPUT_REQUIRED) then
    if OUTBOX then redis.call('XADD', OUTBOX, '*', E_JOB, outbox_job, E_SEQ, run_seq)
    else store = 'store' end
  end
  local queued = field(F_WAITING)
  if queued then
    chained = '1'
    local sep = string.find(queued, ',', 1, true)
    if sep then
      nextseq = string.sub(queued, 1, sep - 1)
      redis.call('HSET', TASKS, tid .. F_WAITING, string.sub(queued, sep + 1))
    else
      nextseq = queued
      redis.call('HDEL', TASKS, tid .. F_WAITING)
    end
    nextjob = redis.call('HGET', TASKS, tid .. F_WAITING_JOB .. nextseq)
    redis.call('HSET', TASKS, tid .. F_STATE, SUBMITTED, tid .. F_STATUS, next_status)
    if next_queue == 'r' and JOBS then
      local queued_entry = redis.call('XADD', JOBS, '*', E_JOB, nextjob, E_SEQ, nextseq)
      redis.call('HSET', TASKS, tid .. F_JOB, queued_entry)
      redis.call('HDEL', TASKS, tid .. F_WAITING_JOB .. nextseq)
      nextjob, nextseq = '', ''
    elseif next_queue == 'r' then
      -- Cluster: the store queues it next (begin_run of this run's job repairs a crash).
      redis.call('HSET', TASKS, tid .. F_JOB, PENDING_MARK .. nextseq)
    else
      redis.call('HSET', TASKS, tid .. F_JOB, LOCAL_MARK .. nextseq)
      redis.call('HDEL', TASKS, tid .. F_WAITING_JOB .. nextseq)
    end
  else
    settled(tid)
  end
end
"""
# The change told: the context's TTL, webhooks, the task's event stream and channel.
_TELL = """
set_meta(M_UPDATED, now)
redis.call('ZADD', CONTEXTS, now, cid)
touch(tonumber(ttl), CONTEXTS)
if chained ~= '' then notify(cid, tid, D_STATUS, SUBMITTED, now, tonumber(ttl), nil, push_ids)
elseif new_state ~= '' then
  notify(cid, tid, D_STATUS, new_state, now, tonumber(ttl), nil, push_ids)
end
if chained ~= '' then
  emit(tid, EV_STATUS, next_status, tonumber(ttl), false)
  redis.call('PUBLISH', EVENTS .. tid, SIGNAL_NEXT .. '|' .. run_seq)
elseif new_state ~= '' then
  emit(tid, EV_STATUS, status, tonumber(ttl), TERMINAL[new_state])
  redis.call('PUBLISH', EVENTS .. tid, new_state .. '|' .. run_seq)
elseif artifact_events ~= '' then
  redis.call('PUBLISH', EVENTS .. tid, SIGNAL_ARTIFACT .. '|' .. run_seq)
end
if not returns_arts then arts = false end
return answer({'ok', arts, store, chained, nextjob, nextseq, PUSHED})
"""

UPDATE = PRELUDE + UpdateArgs.lua() + _READ + _WRITE + _FINISH + _TELL


@dataclass(frozen=True, slots=True)
class UpdateReply:
    outcome: str  # 'ok', 'gone', 'terminal', 'skipped', 'fenced' or 'moot'
    artifacts: bytes | None = None  # with a write that ends the run or settles the task
    store_turn: bool = False  # a cluster: the caller queues the turn in the outbox
    chained: bool = False  # the run settled while messages waited: the next one is queued
    # The next waiting message's run (seq, job fields) when the caller queues it itself.
    next_run: tuple[int, bytes] | None = None
    pushed: bool = False  # a cluster: webhook deliveries wait in the context's slot


def update_reply(reply: list[Any]) -> UpdateReply:
    outcome = text(reply[0])
    if outcome != "ok":
        return UpdateReply(outcome)
    next_run = (int(reply[5]), reply[4]) if reply[5] else None
    store_turn, chained = text(reply[2]) == "store", text(reply[3]) == "1"
    return UpdateReply(outcome, reply[1], store_turn, chained, next_run, pushed(reply, 6))
