"""The send script: a user message stored and its run started, in one step.

``SendArgs`` are its arguments, ``send_reply`` reads its reply into one of the records of
``SendReply``. The script is four parts run as one: the message admitted (its context and
task resolved, a replay recognised, references and quotas checked: a refused message
leaves nothing behind), stored, then its run queued (or the message waits for the runs
before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.store.lua.contract import ScriptArgs, text
from gateway.store.lua.prelude import PRELUDE

__all__ = [
    "SEND",
    "SendAccepted",
    "SendArgs",
    "SendDuplicate",
    "SendOrigin",
    "SendRefused",
    "SendReply",
    "SendWaiting",
    "send_reply",
]

# ARGV: SendArgs. Flags: 'r' queue the run on the jobs stream (with the message: an
# accepted message always has its run queued), 'l' the run is this process's (in-process
# queue), 'e' queue the message for embedding; and the run policy for a task whose run is
# under way (its ':job' is set): 'w' enqueue (the message waits in ':w' for the run to
# settle), 'x' reject, 'i' interrupt (the run is superseded: fenced off, its job dropped,
# and earlier messages count as run).
# The message is stored and its run starts (with what the run needs, so it makes no second
# read), or it waits for the runs before it, or it was stored before, or it is refused.
# Reply: ``send_reply``.


@dataclass(slots=True)
class SendArgs(ScriptArgs):
    """The send script's ARGV, in order."""

    # 'new' (the message opens the context), 'continue', or 'named' (the client named the
    # context: continue it, or open it when the user has none of that id and no tombstone)
    mode: str
    cid: str
    mid: str  # the messageId
    digest: str
    tid: str
    continuing: str  # '1': the message continues the task
    message: bytes  # json
    metadata: bytes  # the task's metadata json, or ''
    status: bytes  # json
    now: int  # ms
    ttl: int  # ms
    stale_origin: str  # the context this messageId opened before, now gone, or ''
    job: bytes  # the job's fields, json
    claimant: str  # a consumer taking a job now, or ''
    flags: str
    quotas: str  # 'messages,bytes,contexts,running' (0: none)
    push_config: bytes  # a push config json (with its `id`) for the task, or ''
    subject: bytes  # the subject a new context is bound to (sealed), or ''
    refs: Sequence[str]  # the reference ids (the rest of ARGV)


# The message's context and task: a named context opens or continues, a replayed messageId
# is answered with what it stored, a continued task must be alive (and, with the policy
# 'reject', idle).
_ADMIT = """
continuing, ttl = continuing == '1', tonumber(ttl)
local function flag(c) return string.find(flags, c, 1, true) ~= nil end
local busy = false
local named = mode == 'named'
if named then
  if redis.call('EXISTS', META) == 1 then mode = 'continue'
  elseif redis.call('EXISTS', CONTEXTS .. GONE .. redis.sha1hex(cid)) == 1 then
    return {'nocontext'}
  else mode = 'new' end
end
if named and mode == 'new' then
  -- a named context has no origin: a retry names it again
elseif mode == 'new' then
  local origin = redis.call('HGET', ORIGINS, mid)
  if origin and origin ~= stale_origin then return {'origin', origin} end
  if redis.call('EXISTS', META) == 1 then return {'collision'} end
else
  if redis.call('EXISTS', META) == 0 then return {'nocontext'} end
  local prior = redis.call('HGET', MIDS, mid)
  if prior then
    local a = string.find(prior, '|', 1, true)
    local b = string.find(prior, '|', a + 1, true)
    if not b then return {'dup', string.sub(prior, 1, a - 1), string.sub(prior, a + 1), '0'} end
    return {'dup', string.sub(prior, 1, a - 1), string.sub(prior, a + 1, b - 1),
            string.sub(prior, b + 1)}
  end
  if continuing then
    local state, job
    state, job, LOGGED = unpack(redis.call('HMGET', TASKS, tid .. F_STATE, tid .. F_JOB,
                                           tid .. F_LOGGED))
    if not state then return {'notask'} end
    if TERMINAL[state] then return {'terminal', state} end
    busy = job ~= false
    if busy and flag('x') then return {'busy'} end
  end
end
"""
# The references must name tasks of the context, and the quotas must have room.
_QUOTAS = """
local unknown = {}
for i = refs_from, #ARGV do
  if redis.call('HEXISTS', TASKS, ARGV[i] .. F_STATE) == 0 then
    unknown[#unknown + 1] = ARGV[i]
  end
end
if #unknown > 0 then return {'badrefs', unpack(unknown)} end
-- Quotas: checked here, before the first write, so a refused message leaves nothing behind
-- (a replayed messageId answered 'dup' above is never refused). Messages count the whole
-- context (replies too); bytes are the context's 'bytes' field, which every stored message,
-- reply and artifact adds to; contexts are the user's index (expired ones until pruned).
local qm, qb, qc, qr = string.match(quotas, '^(%d+),(%d+),(%d+),(%d+)$')
qm, qb, qc, qr = tonumber(qm), tonumber(qb), tonumber(qc), tonumber(qr)
-- Running tasks: a message starts a run unless its task's run is under way. Entries of
-- contexts that expired meanwhile (no script saw their runs end) age out with the TTL.
if qr > 0 and not busy and not redis.call('ZSCORE', RUNNING, tid) then
  redis.call('ZREMRANGEBYSCORE', RUNNING, '-inf', '(' .. (tonumber(now) - ttl))
  if redis.call('ZCARD', RUNNING) >= qr then return {'quota', 'running_tasks_per_user', qr} end
end
if qc > 0 and mode == 'new' and redis.call('ZCARD', CONTEXTS) >= qc then
  return {'quota', 'contexts_per_user', qc}
end
if qm > 0 and mode ~= 'new' and redis.call('HLEN', MSGS) >= qm then
  return {'quota', 'messages_per_context', qm}
end
-- A message that continues the context reads the meta's counters once, here, and the
-- script sets them with its other meta fields in one HSET at its end (`stored`).
local tasks_count, embeds_queued
if mode ~= 'new' then
  META_SEQ, META_BYTES, tasks_count, embeds_queued = unpack(redis.call('HMGET', META, M_SEQ,
    M_BYTES, M_TASKS, M_EMBED_QUEUED))
end
if qb > 0 and tonumber(META_BYTES or '0') + #message > qb then
  return {'quota', 'bytes_per_context', qb}
end
local push = nil
if push_config ~= '' then
  push = cjson.decode(push_config)
  if continuing and not push_room(tid, push.id, 10) then return {'pushfull'} end
end
-- A message that opens the context (a new id, so none of the context's keys exists) starts
-- its first task: its meta key is written whole at once.
"""
# The message stored: a new context or task, or the next message of either.
_STORE = """
local fresh = mode == 'new'
local seq
-- A new task's fields, written in one HSET with its job and attempt (`stored`).
local task_sets = false
local function set_task(...)
  for _, v in ipairs({...}) do task_sets[#task_sets + 1] = v end
end
-- Every reply once the message is stored: the new task's fields and the meta's go in one
-- HSET each, then the keys take their TTL (after the writes that create them).
local function stored(reply)
  if task_sets then redis.call('HSET', TASKS, unpack(task_sets)) end
  if not fresh then set_meta(M_UPDATED, now) end  -- a new meta key was written whole
  flush_meta()
  if fresh then
    -- A context opened here has only the keys this script wrote (and the user's): they take
    -- the full TTL as new keys do (`touch_keys`), the others take theirs from the script
    -- that creates them.
    META_LEFT = ttl
    touch_keys(ttl, true, CONTEXTS, TASK_INDEX, ORIGINS, META, ITEMS, TASKS, MSGS, MIDS)
  else
    touch(ttl, CONTEXTS, TASK_INDEX)
  end
  return reply
end
if fresh then
  seq = 1
  local meta = {M_CREATED, now, M_UPDATED, now, M_SEQ, seq, M_TASKS, 1, M_BYTES, #message}
  if not named then meta[#meta + 1], meta[#meta + 2] = M_ORIGIN, mid end
  if subject ~= '' then meta[#meta + 1], meta[#meta + 2] = M_SUBJECT, subject end
  if flag('e') then meta[#meta + 1], meta[#meta + 2] = M_EMBED_QUEUED, 1 end
  redis.call('HSET', META, unpack(meta))
  META_LEFT = -1
  if not named then redis.call('HSET', ORIGINS, mid, cid) end
else
  seq = tonumber(META_SEQ or '0') + 1
  set_meta(M_SEQ, seq)
  set_meta(M_BYTES, tonumber(META_BYTES or '0') + #message)  -- for the bytes quota
end
local waits = busy and not flag('i')
redis.call('HSET', MSGS, seq, message)
if continuing then
  local seqs = redis.call('HGET', TASKS, tid .. F_MESSAGES)
  redis.call('HSET', TASKS, tid .. F_MESSAGES, seqs .. ',' .. seq)
  if not waits then
    redis.call('HSET', TASKS, tid .. F_STATE, SUBMITTED, tid .. F_STATUS, status)
    emit(tid, EV_STATUS, status, ttl, false)
  end
else
  redis.call('RPUSH', ITEMS, tid)
  task_sets = {tid .. F_STATE, SUBMITTED, tid .. F_STATUS, status, tid .. F_ARTIFACTS, '[]',
               tid .. F_MESSAGES, seq}
  if metadata ~= '' then set_task(tid .. F_METADATA, metadata) end
  redis.call('HSET', TASK_INDEX, tid, cid)
  if not fresh then set_meta(M_TASKS, tonumber(tasks_count or '0') + 1) end
end
if push then push_set(tid, push.id, push_config) end
if not waits then
  -- A new task's only webhook is the one this message brings.
  local ids = nil
  if not continuing then ids = push and push.id or false end
  notify(cid, tid, D_STATUS, SUBMITTED, now, ttl, nil, ids)
end
redis.call('HSET', MIDS, mid, tid .. '|' .. digest .. '|' .. seq)
redis.call('ZADD', CONTEXTS, now, cid)
if flag('e') then
  if not fresh then set_meta(M_EMBED_QUEUED, tonumber(embeds_queued or '0') + 1) end
  if EMBEDS then redis.call('XADD', EMBEDS, '*', E_JOB, job, E_SEQ, seq) end
end
if waits then
  local queued = redis.call('HGET', TASKS, tid .. F_WAITING)
  if queued then queued = queued .. ',' .. seq else queued = tostring(seq) end
  redis.call('HSET', TASKS, tid .. F_WAITING, queued, tid .. F_WAITING_JOB .. seq, job)
  return stored({'wait', tid, seq})
end
"""
# The message's run: it supersedes a run under way (policy 'interrupt'), then it is queued
# on the jobs stream (and taken at once by a free worker of the sender's process), left to
# the in-process queue, or, on a cluster, left for the store to queue.
_RUN = """
redis.call('ZADD', RUNNING, now, tid)
redis.call('PEXPIRE', RUNNING, text(ttl))
local superseded = ''
if busy then
  superseded = redis.call('HGET', TASKS, tid .. F_JOB)
  drop_waiting(tid)
  redis.call('HSET', TASKS, tid .. F_RAN, seq - 1)
  redis.call('HDEL', TASKS, tid .. F_ATTEMPT, tid .. F_MARK, tid .. F_JOB)
  if JOBS then ack(superseded); superseded = '' end
  redis.call('PUBLISH', STOPS .. tid, SIGNAL_INTERRUPTED .. '|' .. (seq - 1))
end
local referenced = referenced_tasks(refs_from)
-- The run's job and the attempt that owns it: a new task's go with its other fields, and
-- what it held when its run began is '[]' and this message's seq.
local function set_job(value)
  if task_sets then set_task(tid .. F_JOB, value)
  else redis.call('HSET', TASKS, tid .. F_JOB, value) end
end
local function fence_run(att)
  if task_sets then set_task(tid .. F_ATTEMPT, att, tid .. F_MARK, '2|' .. #tostring(seq))
  else fence(tid, att) end
end
-- The reply of a message whose run starts: ``SendAccepted``'s fields, in their order.
local function accepted(entry, claimed_entry, claimed_fields, superseded, pushed)
  return stored({'ok', tid, seq, referenced, entry, claimed_entry, claimed_fields, superseded,
                 pushed})
end
if flag('l') then
  set_job(LOCAL_MARK .. seq)
  fence_run(attempt_id('local', seq))
  return accepted('', '', {}, superseded, PUSHED or '')
end
if not flag('r') then return accepted('', '', {}, superseded, PUSHED or '') end
if not JOBS then
  -- Cluster: the store queues the job next; until it records the entry, a retry of this
  -- message can tell that the job may not exist and queue it again.
  set_job(PENDING_MARK .. seq)
  return accepted('', '', {}, superseded, PUSHED or '')
end
local entry = redis.call('XADD', JOBS, '*', E_JOB, job, E_SEQ, seq)
set_job(entry)
if claimant == '' then return accepted(entry, '', {}, '', '') end
-- The sender's process has a free worker: it takes the next job at once (usually this one,
-- which then starts fenced to that worker, with no read of its own).
local got = redis.pcall('XREADGROUP', 'GROUP', GROUP, claimant, 'COUNT', 1,
                        'STREAMS', JOBS, '>')
if got.err or not got[1] then return accepted(entry, '', {}, '', '') end
local claimed = got[1][2][1]
if claimed[1] == entry then fence_run(attempt_id(claimant, entry)) end
return accepted(entry, claimed[1], claimed[2], '', '')
"""

SEND = PRELUDE + SendArgs.lua() + _ADMIT + _QUOTAS + _STORE + _RUN


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


def _accepted(reply: list[Any]) -> SendAccepted:
    """The reply of ``accepted`` in the script, field by field."""
    _, task_id, seq, referenced, entry, claimant_entry, claimed_fields, superseded = reply[:8]
    pushed = reply[8]
    claimed = None
    if text(claimant_entry):
        fields = claimed_fields
        claimed = (
            text(claimant_entry),
            {fields[i]: fields[i + 1] for i in range(0, len(fields), 2)},
        )
    return SendAccepted(
        task_id=text(task_id),
        seq=int(seq),
        referenced=referenced,
        entry=text(entry),
        claimed=claimed,
        superseded=text(superseded),
        pushed=text(pushed) == "push",
    )


def send_reply(reply: list[Any]) -> SendReply:
    kind = text(reply[0])
    if kind == "ok":
        return _accepted(reply)
    if kind == "wait":
        return SendWaiting(text(reply[1]), int(reply[2]))
    if kind == "dup":
        return SendDuplicate(text(reply[1]), text(reply[2]), int(reply[3]))
    if kind == "origin":
        return SendOrigin(text(reply[1]))
    return SendRefused(kind, [text(r) for r in reply[1:]])
