"""Every Lua script of the gateway, registered once per client (``Scripts``): the context
scripts, and those of the job streams (``jobs.py``), the agent registry
(``agents_store.py``), key rotation (``rotation.py``), rate limits and API keys.

Each context script takes the fourteen keys of ``ContextKeys.all()`` in that order (the
context's thirteen and the user's running tasks; Lua locals named after its fields, e.g.
``TASKS``), then the job streams, so it may read and write the whole context atomically
and refresh the sliding TTL of every key it owns in O(1). On Redis Cluster the job streams
live in another slot, so they are not passed: the scripts then leave the streams alone and
the store queues and acknowledges jobs in a second step.

A context whose meta key is missing is dead (scrubbed or expired): every writer checks the
meta key inside its script, so no late write can resurrect it. Only a send may open a context
under an id it names (``SendArgs.mode`` 'named'), never one scrubbed within the retention:
the scrub leaves a tombstone (``GONE``) for that long.

Names shared with Python (fields, marks, channels, states) are generated into each script's
prelude from their definitions (``LUA_NAMES``). A script's ARGV is a NamedTuple here, in
ARGV order, whose fields become the script's Lua locals (``_lua_args``) and which the store
builds and spreads with ``argv``: the order is written once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, NamedTuple, get_origin, get_type_hints

from redis.commands.core import AsyncScript

from gateway import a2a
from gateway.a2a import INTERRUPTED, TERMINAL
from gateway.store import fields as f
from gateway.store.keys import (
    CONTEXT_KEY_COUNT,
    EMBEDS_GROUP,
    EVENT_CHANNEL,
    EVENT_STREAM,
    EVENTS_GRACE_MS,
    GONE,
    JOBS_GROUP,
    PENDING_PUSHES,
    SIGNAL_ARTIFACT,
    SIGNAL_INTERRUPTED,
    SIGNAL_NEXT,
    STOP_CHANNEL,
    ContextKeys,
)

__all__ = [
    "LUA_NAMES",
    "AddVectorsArgs",
    "BeginRunArgs",
    "CancelArgs",
    "CreateAgentArgs",
    "DropIdleArgs",
    "ForgetDeadArgs",
    "LeadArgs",
    "LeaveArgs",
    "PushConfigArgs",
    "ReadAgentArgs",
    "RecordJobArgs",
    "RememberArgs",
    "ReplaceAgentArgs",
    "ResetVectorsArgs",
    "ResignArgs",
    "RewriteVectorsArgs",
    "Scripts",
    "ScrubArgs",
    "SendArgs",
    "SnapshotArgs",
    "SwapFieldsArgs",
    "SwapLogArgs",
    "SwapStringArgs",
    "TakePushesArgs",
    "UpdateArgs",
    "UseApiKeyArgs",
    "VectorRows",
    "argv",
]

# Every name the scripts share with Python, as the Lua locals of their prelude (generated
# here, so the scripts never spell a field, key part or state themselves).
LUA_NAMES: Mapping[str, str | int] = {
    "F_STATE": f.STATE,
    "F_STATUS": f.STATUS,
    "F_ARTIFACTS": f.ARTIFACTS,
    "F_MESSAGES": f.MESSAGES,
    "F_METADATA": f.METADATA,
    "F_AGENT_METADATA": f.AGENT_METADATA,
    "F_OPEN_ARTIFACT": f.OPEN_ARTIFACT,
    "F_ATTEMPT": f.ATTEMPT,
    "F_MARK": f.MARK,
    "F_JOB": f.JOB,
    "F_RAN": f.RAN,
    "F_WAITING": f.WAITING,
    "F_WAITING_JOB": f.WAITING_JOB,
    "F_PUSH_IDS": f.PUSH_IDS,
    "F_PUSH_CONFIG": f.PUSH_CONFIG,
    "F_PUSH_EVENTS": f.PUSH_EVENTS,
    "F_LOGGED": f.LOGGED,
    "PENDING_MARK": f.PENDING_MARK,
    "LOCAL_MARK": f.LOCAL_MARK,
    "M_CREATED": f.META_CREATED,
    "M_UPDATED": f.META_UPDATED,
    "M_SEQ": f.META_SEQ,
    "M_TASKS": f.META_TASKS,
    "M_ORIGIN": f.META_ORIGIN,
    "M_SUBJECT": f.META_SUBJECT,
    "M_BYTES": f.META_BYTES,
    "M_EMBED_QUEUED": f.META_EMBED_QUEUED,
    "M_EMBEDDED": f.META_EMBEDDED,
    "M_VECTOR_MODEL": f.META_VECTOR_MODEL,
    "M_VECTOR_DIMS": f.META_VECTOR_DIMS,
    "M_VECTOR_FORM": f.META_VECTOR_FORM,
    "M_VECTOR_GENERATION": f.META_VECTOR_GENERATION,
    "M_REEMBEDDING": f.META_REEMBEDDING,
    "E_JOB": f.ENTRY_JOB,
    "E_SEQ": f.ENTRY_SEQ,
    "E_FORGET": f.ENTRY_FORGET,
    "EV_KIND": f.EVENT_KIND,
    "EV_DATA": f.EVENT_DATA,
    "EV_STATUS": f.EVENT_STATUS,
    "EV_ARTIFACT": f.EVENT_ARTIFACT,
    "SUBMITTED": a2a.SUBMITTED,
    "CANCELED": a2a.CANCELED,
    "COMPLETED": a2a.COMPLETED,
    "INPUT_REQUIRED": a2a.INPUT_REQUIRED,
    "GROUP": JOBS_GROUP,
    "EMBEDS_GROUP": EMBEDS_GROUP,
    "D_TENANT": f.DELIVERY_TENANT,
    "D_USER": f.DELIVERY_USER,
    "D_CONTEXT": f.DELIVERY_CONTEXT,
    "D_TASK": f.DELIVERY_TASK,
    "D_CONFIG": f.DELIVERY_CONFIG,
    "D_NUMBER": f.DELIVERY_NUMBER,
    "D_KIND": f.DELIVERY_KIND,
    "D_STATE": f.DELIVERY_STATE,
    "D_ARTIFACT_ID": f.DELIVERY_ARTIFACT_ID,
    "D_QUEUED": f.DELIVERY_QUEUED,
    "D_STATUS": f.DELIVERY_STATUS,
    "D_ARTIFACT": f.DELIVERY_ARTIFACT,
    "C_TENANT": f.CONFIG_TENANT,
    "C_USER": f.CONFIG_USER,
    "C_ARTIFACTS": f.CONFIG_ARTIFACTS,
    "EVENTS": EVENT_CHANNEL,
    "STOPS": STOP_CHANNEL,
    "SIGNAL_NEXT": SIGNAL_NEXT,
    "SIGNAL_INTERRUPTED": SIGNAL_INTERRUPTED,
    "SIGNAL_ARTIFACT": SIGNAL_ARTIFACT,
    "EVENT_STREAM": EVENT_STREAM,
    "EVENTS_GRACE_MS": EVENTS_GRACE_MS,
    "PENDING_PUSHES": PENDING_PUSHES,
    "GONE": GONE,
    # The keys whose TTL a write of the context refreshes: all of its own (not the user's
    # running tasks, nor the streams).
    "CONTEXT_TTL_KEYS": CONTEXT_KEY_COUNT - 1,
    "CONTEXT_KEY_COUNT": CONTEXT_KEY_COUNT,
}


def _lua_value(value: str | int) -> str:
    if isinstance(value, int):
        return str(value)
    if any(c in value for c in "'\\\n"):
        raise ValueError(f"not a plain Lua string: {value!r}")
    return f"'{value}'"


def _lua_set(name: str, members: frozenset[str]) -> str:
    return (
        f"local {name} = {{" + ", ".join(f"[{_lua_value(m)}] = true" for m in sorted(members)) + "}"
    )


_CONSTANTS = (
    "\n".join(
        [
            *(f"local {name} = {_lua_value(value)}" for name, value in LUA_NAMES.items()),
            _lua_set("TERMINAL", TERMINAL),
            _lua_set("INTERRUPTED", INTERRUPTED),
        ]
    )
    + "\n"
)


def _lua_args(args: type[tuple[Any, ...]]) -> str:
    """A script's ARGV as Lua locals named after the fields of ``args``, a NamedTuple in ARGV
    order (so the order is written once). A last field typed ``Sequence`` is the rest of
    ARGV: the local ``<field>_from`` is its first index."""
    names = list(args._fields)  # type: ignore[attr-defined]
    rest = get_origin(get_type_hints(args)[names[-1]]) is Sequence
    fixed = names[:-1] if rest else names
    text = ""
    if fixed:
        argv_of = ", ".join(f"ARGV[{i}]" for i in range(1, len(fixed) + 1))
        text = f"local {', '.join(fixed)} = {argv_of}\n"
    if rest:
        text += f"local {names[-1]}_from = {len(fixed) + 1}\n"
    return text


def argv(args: tuple[Any, ...]) -> list[Any]:
    """A script's ARGV from its args (a last sequence field is spread)."""
    *fixed, last = args
    return [*fixed, *last] if isinstance(last, list | tuple) else list(args)


# A context script's keys (``ContextKeys.all()``) as locals named after its fields: CONTEXTS,
# TASK_INDEX, ORIGINS, META, ITEMS, TASKS, MSGS, MIDS, VECTORS, VECTOR_SEQS, VECTOR_BITS,
# SEEN, LEDGER, RUNNING; then the streams: jobs, embeddings, long-term memory outbox and
# push deliveries (absent on a cluster).
_CONTEXT_NAMES = [k.name.upper() for k in dataclass_fields(ContextKeys)]


def _context_keys_from(base: str) -> str:
    """Lua: the context's key locals assigned from KEYS, the first at index ``base`` + 1."""
    keys = ", ".join(f"KEYS[{base}{i}]" for i in range(1, len(_CONTEXT_NAMES) + 1))
    return f"{', '.join(_CONTEXT_NAMES)} = {keys}\n"


_CONTEXT_KEYS = "local " + _context_keys_from("")
_SLIDING_TTL = """
-- The sliding TTL (ms): every key of a context expires with its meta key. A write refreshes
-- all of them only once the meta key has lost more than 1% of the TTL (at most an hour)
-- since the last refresh, so most writes spend one PTTL instead of thirteen PEXPIREs, and a
-- context expires between TTL minus that slack and TTL after its last write, never later.
-- `...` names the keys the calling script may have created: when the refresh is skipped,
-- each of them that has no TTL yet takes the meta key's remaining one.
-- META_LEFT: the meta key's remaining TTL, read once per script (no script changes it but
-- through `touch`, which keeps it up to date; a script that creates the meta key sets -1).
local META_LEFT = nil
-- Where the context's keys start in KEYS: 0 but in a script of several contexts (`bind`).
local KEY_BASE = 0
-- An integer as the text a command takes. Redis turns a Lua number argument into text with
-- printf ('%.17g'), about half a microsecond each; a script passes the same TTL to many
-- commands, so the last one converted is kept. '%d', not tostring: tostring writes 1e14
-- and above in exponent form, which no command takes as an integer.
local TEXT_OF, TEXT = nil, nil
local function text(n)
  if n ~= TEXT_OF then TEXT_OF, TEXT = n, string.format('%d', n) end
  return TEXT
end
local function meta_left()
  if META_LEFT == nil then META_LEFT = redis.call('PTTL', META) end
  return META_LEFT
end
-- `fresh`: the calling script has just created the keys of `...`, so none has a TTL to read.
local function touch_keys(ttl, fresh, ...)
  local left = meta_left()
  if left < 0 or ttl - left > math.min(ttl / 100, 3600000) then
    for i = 1, CONTEXT_TTL_KEYS do redis.call('PEXPIRE', KEYS[KEY_BASE + i], text(ttl)) end
    META_LEFT = ttl
    return
  end
  for _, key in ipairs({...}) do
    if fresh or redis.call('PTTL', key) == -1 then redis.call('PEXPIRE', key, text(left)) end
  end
end
local function touch(ttl, ...) touch_keys(ttl, false, ...) end
-- The meta key's fields a script sets, written in one HSET (`flush_meta`) when its other
-- writes are done: a send or a run's last write sets several (its seq, bytes, counts,
-- vector fields, when it was updated), and each write command is also an entry of the
-- append-only file and of the replication stream. Whatever the script read of them
-- (META_SEQ, META_BYTES) it keeps, so it reads each once.
local META_SETS = {}
local META_SEQ, META_BYTES = nil, nil
local function set_meta(name, value)
  META_SETS[#META_SETS + 1], META_SETS[#META_SETS + 2] = name, value
end
local function flush_meta()
  if #META_SETS > 0 then redis.call('HSET', META, unpack(META_SETS)); META_SETS = {} end
end
"""
# A script of several contexts of one user binds each in turn: its keys are the CONTEXT_KEY_COUNT
# from KEYS[base + 1] on (the locals the prelude's helpers see), and its TTL is read afresh.
_BIND_CONTEXT = (
    "local function bind(base)\n  "
    + _context_keys_from("base + ")
    + "  KEY_BASE, META_LEFT = base, nil\nend\n"
)
_PRELUDE = (
    _CONSTANTS
    + _CONTEXT_KEYS
    + _SLIDING_TTL
    + """
local JOBS, EMBEDS, OUTBOX = KEYS[15], KEYS[16], KEYS[17]
-- The task's run (and any message waiting for it) is over: it leaves the running tasks.
local function settled(tid) redis.call('ZREM', RUNNING, tid) end
-- Acknowledge and drop a job entry of the stream (its work is done or moot). Marks that are
-- not stream entries ('pending:<seq>' on a cluster, 'local:<seq>' for the in-process queue)
-- are left alone.
local function ack(entry)
  if entry and entry ~= '' and JOBS and not string.find(entry, ':', 1, true) then
    redis.pcall('XACK', JOBS, GROUP, entry)
    redis.call('XDEL', JOBS, entry)
  end
end
-- The attempt id of a run taken by `owner` ('local' for the in-process queue) as stream
-- entry or message seq `job`: the twin of gateway.engine.runs.attempt_id, keep them alike.
local function attempt_id(owner, job) return owner .. '/' .. job end
-- Make `att` the attempt that owns the task's run, marking how much artifact and history
-- the task held when it began, '<artifacts length>|<messages length>' (what a later attempt
-- rolls back to). The send script fences a new task's first run itself, with its fields.
local function fence(tid, att)
  local arts = redis.call('HSTRLEN', TASKS, tid .. F_ARTIFACTS)
  local seqs = redis.call('HSTRLEN', TASKS, tid .. F_MESSAGES)
  redis.call('HSET', TASKS, tid .. F_ATTEMPT, att, tid .. F_MARK, arts .. '|' .. seqs)
end
-- Forget the messages waiting for the task's run (they stay in its history).
local function drop_waiting(tid)
  local queued = redis.call('HGET', TASKS, tid .. F_WAITING)
  if not queued then return end
  for s in string.gmatch(queued, '[^,]+') do
    redis.call('HDEL', TASKS, tid .. F_WAITING_JOB .. s)
  end
  redis.call('HDEL', TASKS, tid .. F_WAITING)
end
-- What a run of the agent is given: its message, and the (header-less) status and
-- artifacts of the referenced tasks (ARGV from `first_ref` on). Earlier messages are loaded
-- only if the agent asks. The send script's caller has the message: it takes only the rest.
local function referenced_tasks(first_ref)
  local refs = {}
  for i = first_ref, #ARGV do
    refs[#refs + 1] = ARGV[i] .. F_STATUS
    refs[#refs + 1] = ARGV[i] .. F_ARTIFACTS
  end
  if #refs == 0 then return {} end
  return redis.call('HMGET', TASKS, unpack(refs))
end
local function run_inputs(seq, first_ref)
  return redis.call('HGET', MSGS, seq), referenced_tasks(first_ref)
end
-- Task event streams (live events for SSE readers on any replica): one stream per task,
-- '<meta key>:ev:<tid>', in the context's slot. Entries: EV_KIND (EV_STATUS or EV_ARTIFACT)
-- and EV_DATA (its json). A stream lives as long as the context unless its task settles, then for
-- EVENTS_GRACE_MS more; a scrub deletes it. A task's events are logged from its first reader
-- on (the snapshot script marks it, F_LOGGED): a script that writes events reads the mark
-- with the task's other fields into LOGGED, and `emit` writes nothing without it.
local LOGGED = false
-- The TTL of a key derived from the context: never past its meta key's (which a write may
-- leave up to the refresh slack short of the full TTL, see touch).
local function derived_ttl(ttl)
  local left = meta_left()
  if left > 0 and left < ttl then return left end
  return ttl
end
local function emit(tid, kind, data, ttl, settled)
  if not LOGGED then return end
  local key = META .. EVENT_STREAM .. tid
  redis.call('XADD', key, '*', EV_KIND, kind, EV_DATA, data)
  ttl = derived_ttl(ttl)
  if settled and ttl > EVENTS_GRACE_MS then ttl = EVENTS_GRACE_MS end
  redis.call('PEXPIRE', key, text(ttl))
end
-- Artifact events written by a run: '<length>:<json>' one after another.
local function emit_artifacts(tid, list, ttl)
  if not LOGGED then return end
  local at = 1
  while at <= #list do
    local colon = string.find(list, ':', at, true)
    local n = tonumber(string.sub(list, at, colon - 1))
    emit(tid, EV_ARTIFACT, string.sub(list, colon + 1, colon + n), ttl, false)
    at = colon + n + 1
  end
end
"""
)

# Push notifications (``gateway/push``). The deliveries stream is the last key. On a cluster
# it is in another slot, so a delivery waits in the context's own zset '<meta key>:push'
# (member: the delivery's json; score: minus the ms it was queued, until a mover takes it,
# then when it was taken) and the script returns 'push' where its reply says so: the store
# then moves it to the stream (``Store.move_pushes``), or maintenance does after a crash
# between the two steps. A task's webhooks are fields of the tasks hash:
# `<tid>:pn` lists their ids ('a,b'), `<tid>:pn:<id>` holds each config (JSON, with the
# principal's `t`/`u` and `a` when it wants artifact updates); `<tid>:pe` counts the task's
# events, so each has a stable id (`<tid>.<n>`) a receiver can dedupe on.
_PRELUDE += """
local PUSH = JOBS and KEYS[#KEYS]
local PUSH_PENDING = META .. PENDING_PUSHES
local PUSHED = ''  -- 'push': deliveries wait in PUSH_PENDING for the store to move them
-- Whether the task may take the config `id` (it has it, or fewer than `max`).
local function push_room(tid, id, max)
  local ids = redis.call('HGET', TASKS, tid .. F_PUSH_IDS)
  if not ids then return true end
  local n = 0
  for i in string.gmatch(ids, '[^,]+') do
    if i == id then return true end
    n = n + 1
  end
  return n < max
end
local function push_set(tid, id, config)
  local ids = redis.call('HGET', TASKS, tid .. F_PUSH_IDS)
  if not ids then ids = id
  elseif not string.find(',' .. ids .. ',', ',' .. id .. ',', 1, true) then ids = ids .. ',' .. id
  end
  redis.call('HSET', TASKS, tid .. F_PUSH_IDS, ids, tid .. F_PUSH_CONFIG .. id, config)
end
-- Queue one delivery of a change of the task (`kind` 's': its state is now `state`; 'a': the
-- artifact `aid` was added) to each of its webhooks, in the write that made the change.
-- `ids`: the task's webhook ids as the caller read them (false: none), or nil to read them.
local function notify(cid, tid, kind, state, now, ttl, aid, ids)
  if ids == nil then ids = redis.call('HGET', TASKS, tid .. F_PUSH_IDS) end
  if not ids then return end
  local wanted = {}
  for id in string.gmatch(ids, '[^,]+') do
    local stored = redis.call('HGET', TASKS, tid .. F_PUSH_CONFIG .. id)
    local ok, cfg = pcall(cjson.decode, stored or '')
    if ok and (kind == D_STATUS or cfg[C_ARTIFACTS]) then wanted[#wanted + 1] = {id, cfg} end
  end
  if #wanted == 0 then return end
  local n = redis.call('HINCRBY', TASKS, tid .. F_PUSH_EVENTS, 1)
  for _, w in ipairs(wanted) do
    local fields = {}
    fields[D_TENANT], fields[D_USER] = w[2][C_TENANT], w[2][C_USER]
    fields[D_CONTEXT], fields[D_TASK], fields[D_CONFIG], fields[D_NUMBER] = cid, tid, w[1], n
    fields[D_KIND], fields[D_STATE], fields[D_ARTIFACT_ID] = kind, state, aid or ''
    fields[D_QUEUED] = tonumber(now)
    local job = cjson.encode(fields)
    if PUSH then redis.call('XADD', PUSH, '*', E_JOB, job)
    else redis.call('ZADD', PUSH_PENDING, -tonumber(now), job) end
  end
  if not PUSH then
    redis.call('PEXPIRE', PUSH_PENDING, derived_ttl(ttl))
    PUSHED = 'push'
  end
end
"""

# ARGV: SendArgs. Flags: 'r' queue the run on the jobs stream (with the message: an
# accepted message always has its run queued), 'l' the run is this process's (in-process
# queue), 'e' queue the message for embedding; and the run policy for a task whose run is
# under way (its ':job' is set): 'w' enqueue (the message waits in ':w' for the run to
# settle), 'x' reject, 'i' interrupt (the run is superseded: fenced off, its job dropped,
# and earlier messages count as run).
# The message is stored and its run starts (with what the run needs, so it makes no second
# read), or it waits for the runs before it, or it was stored before, or it is refused.
# Reply: ``replies.send_reply``.


class SendArgs(NamedTuple):
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


_SEND = (
    _PRELUDE
    + _lua_args(SendArgs)
    + """
continuing, ttl = continuing == '1', tonumber(ttl)
local function flag(c) return string.find(flags, c, 1, true) ~= nil end
local busy = false
local embed_entry = ''  -- the message's embedding job, when queued here
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
  if EMBEDS then embed_entry = redis.call('XADD', EMBEDS, '*', E_JOB, job, E_SEQ, seq) end
end
if waits then
  local queued = redis.call('HGET', TASKS, tid .. F_WAITING)
  if queued then queued = queued .. ',' .. seq else queued = tostring(seq) end
  redis.call('HSET', TASKS, tid .. F_WAITING, queued, tid .. F_WAITING_JOB .. seq, job)
  return stored({'wait', tid, seq})
end
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
if flag('l') then
  set_job(LOCAL_MARK .. seq)
  fence_run(attempt_id('local', seq))
  return stored({'ok', tid, seq, referenced, '', '', {}, superseded, PUSHED or '', embed_entry})
end
if not flag('r') then
  return stored({'ok', tid, seq, referenced, '', '', {}, superseded, PUSHED or '', embed_entry})
end
if not JOBS then
  -- Cluster: the store queues the job next; until it records the entry, a retry of this
  -- message can tell that the job may not exist and queue it again.
  set_job(PENDING_MARK .. seq)
  return stored({'ok', tid, seq, referenced, '', '', {}, superseded, PUSHED or '', embed_entry})
end
local entry = redis.call('XADD', JOBS, '*', E_JOB, job, E_SEQ, seq)
set_job(entry)
if claimant == '' then
  return stored({'ok', tid, seq, referenced, entry, '', {}, '', '', embed_entry})
end
-- The sender's process has a free worker: it takes the next job at once (usually this one,
-- which then starts fenced to that worker, with no read of its own).
local got = redis.pcall('XREADGROUP', 'GROUP', GROUP, claimant, 'COUNT', 1,
                        'STREAMS', JOBS, '>')
if got.err or not got[1] then
  return stored({'ok', tid, seq, referenced, entry, '', {}, '', '', embed_entry})
end
local claimed = got[1][2][1]
if claimed[1] == entry then fence_run(attempt_id(claimant, entry)) end
return stored({'ok', tid, seq, referenced, entry, claimed[1], claimed[2], '', '', embed_entry})
"""
)

# Lua: `add`, one context's part of adding vectors (the context bound, the locals `ttl`,
# `new_model` and `new_dims` set); shared by the add-vectors script and the update script,
# which adds the vector of a run's own message with the run's last write. The meta fields it
# sets wait in META_SETS for the caller's `flush_meta`.
_ADD_CONTEXT_VECTORS = """
local function add(skipped, frame, rows_at, rows_end)
  local seq, model, dims, form, queued, reembedding, embedded, bytes = unpack(redis.call(
    'HMGET', META, M_SEQ, M_VECTOR_MODEL, M_VECTOR_DIMS, M_VECTOR_FORM, M_EMBED_QUEUED,
    M_REEMBEDDING, M_EMBEDDED, M_BYTES))
  if not seq then return 0 end  -- gone: every context that has a message has a seq
  META_SEQ, META_BYTES = seq, bytes
  if (model and model ~= new_model) or (dims and (not model or dims ~= new_dims)) then
    return -1, true
  end
  local sealed = frame ~= ''
  -- Vectors already stored: their seqs and bits were written beside them, with the TTL.
  -- None stored: no bit is set, and the three keys this creates have no TTL yet.
  local stored = redis.call('STRLEN', VECTORS) > 0
  if stored and (form == 's') ~= sealed then return -3, true end
  if sealed then
    for i = rows_at, stored and rows_end or 0, 3 do  -- none stored: no bit to find
      if redis.call('GETBIT', VECTOR_BITS, tonumber(ARGV[i + 1])) == 1 then return -2, true end
    end
    if form ~= 's' then set_meta(M_VECTOR_FORM, 's') end
  elseif form then
    redis.call('HDEL', META, M_VECTOR_FORM)
  end
  -- From here on nothing is refused: the meta fields wait for the caller's `flush_meta`.
  if not dims then set_meta(M_VECTOR_MODEL, new_model); set_meta(M_VECTOR_DIMS, new_dims) end
  local seqs, rows = {}, {}
  for i = rows_at, rows_end, 3 do
    if redis.call('SETBIT', VECTOR_BITS, tonumber(ARGV[i + 1]), 1) == 0 then
      seqs[#seqs + 1] = ARGV[i]
      if not sealed then rows[#rows + 1] = ARGV[i + 2] end
    end
  end
  local added = #seqs
  if sealed and added > 0 and frame ~= '-' then rows = {frame} end
  -- Appended to what is stored; the first rows create the keys with the meta key's TTL
  -- (what `touch_keys` would give them), a command each fewer.
  local left = meta_left()
  local px = not stored and text(left > 0 and left or tonumber(ttl))
  local function write(key, parts)
    if #parts == 0 then return end
    if stored then redis.call('APPEND', key, table.concat(parts))
    else redis.call('SET', key, table.concat(parts), 'PX', px) end
  end
  write(VECTOR_SEQS, seqs)
  write(VECTORS, rows)
  local done = tonumber(embedded or '0') + added + tonumber(skipped)
  set_meta(M_EMBEDDED, done)
  if reembedding and done >= tonumber(queued or '0') then
    redis.call('HDEL', META, M_REEMBEDDING)
  end
  if stored then
    touch(tonumber(ttl))
  else
    touch_keys(tonumber(ttl), true, VECTOR_BITS)
  end
  return added, true
end
"""

# ARGV: UpdateArgs. A finishing write that leaves the task completed or input-required,
# given an outbox job, queues the turn in the outbox (on a cluster it returns 'store' instead).
# Events are published as '<state>|<seq>', so a waiter can tell this run's news from an
# earlier run's of the same task. A finishing write while messages wait for the task does not
# settle it: the run's artifacts and reply are stored, the next message's run is queued, the
# task goes back to 'submitted' and the event is 'next|<seq>'.
# Reply: ``replies.update_reply`` (artifacts only with a write that ends the run or leaves
# the task terminal or interrupted; every reply says after its kind whether the embedding
# job of ``embed_entry`` is done). Terminal tasks take
# no writes: a late result after a cancel is dropped. A finishing write records the run as
# done and acknowledges its job in the same step, so a crash can neither lose nor repeat it.


class UpdateArgs(NamedTuple):
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
    embed_entry: str  # the run's message's embedding job, when its vector comes along, or ''
    new_model: str  # that vector's model, or ''
    new_dims: int  # its dimensions, or 0
    vectors: Sequence[bytes | int | str]  # its VectorRows, spread (none without embed_entry)


_UPDATE = (
    _PRELUDE
    + _lua_args(UpdateArgs)
    + _ADD_CONTEXT_VECTORS
    + """
finish, ttl = finish == '1', tonumber(ttl)
-- The vector of the run's own message, whatever becomes of the task: once added (or moot,
-- the context being gone), its embedding job is done. Refused (another model, form or a
-- seq already embedded), the job stays for the indexer, which knows what to do.
local embedded = ''  -- '1': the job is done (every reply says so after its kind)
local alive = false  -- the context is known to exist (its vector's write read its meta)
if embed_entry ~= '' and EMBEDS then
  local rows_end = vectors_from + 2 + 3 * tonumber(ARGV[vectors_from + 2])
  local added
  added, alive = add(ARGV[vectors_from], ARGV[vectors_from + 1], vectors_from + 3, rows_end)
  if added >= 0 then
    redis.pcall('XACK', EMBEDS, EMBEDS_GROUP, embed_entry)
    redis.call('XDEL', EMBEDS, embed_entry)
    embedded = '1'
  end
end
if not alive and redis.call('EXISTS', META) == 0 then ack(entry); return {'gone', embedded} end
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
if not state then ack(entry); return answer({'gone', embedded}) end
if TERMINAL[state] then
  if finish then ack(entry); settled(tid) end
  return answer({'terminal', embedded})
end
if finish and tonumber(ran or '0') >= tonumber(run_seq) then
  ack(entry)
  return answer({'moot', embedded})
end
if attempt ~= '' and owner ~= attempt then return answer({'fenced', embedded}) end
if required_state ~= '' and state ~= required_state then return answer({'skipped', embedded}) end
if #artifacts + #reply > 0 then  -- the bytes quota counts replies and artifacts too
  if not META_SEQ then
    META_SEQ, META_BYTES = unpack(redis.call('HMGET', META, M_SEQ, M_BYTES))
  end
  META_BYTES = tonumber(META_BYTES or '0') + #artifacts + #reply
  set_meta(M_BYTES, META_BYTES)
end
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
return answer({'ok', embedded, arts, store, chained, nextjob, nextseq, PUSHED})
"""
)

# ARGV: CancelArgs. Reply: ``replies.cancel_reply``.
# Messages waiting for the task's run are dropped with it (they stay in its history).


class CancelArgs(NamedTuple):
    """The cancel script's ARGV, in order."""

    cid: str
    tid: str
    status: bytes  # json
    now: int  # ms
    ttl: int  # ms


_CANCEL = (
    _PRELUDE
    + _lua_args(CancelArgs)
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

# ARGV: BeginRunArgs.
# Starts a run of the message at `seq`, or finds it moot: the task is gone, terminal or
# already ran that message (the job is then acknowledged). On a cluster a moot run may name
# the next waiting message's run: the run before it settled but its process died before
# queueing that job, which the caller queues now. Reply: ``replies.begin_run_reply``.
# With an attempt id, the run is fenced: writes of any earlier attempt (a worker that died
# or stalled mid-run) are rolled back to where that attempt began (messages that arrived
# since and wait for the task are kept), and only this attempt may write from now on.


class BeginRunArgs(NamedTuple):
    """The begin-run script's ARGV, in order."""

    tid: str
    seq: int
    att: str  # the attempt id, or ''
    entry: str  # the job entry, or ''
    refs: Sequence[str]  # the reference ids (the rest of ARGV)


_BEGIN_RUN = (
    _PRELUDE
    + _lua_args(BeginRunArgs)
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

# KEYS: the keys of one or more contexts of one user, CONTEXT_KEY_COUNT each (``ContextKeys.all()``
# cut to that count). ARGV: AddVectorsArgs, then per context, in the order of its keys:
# VectorRows. Adds the vectors of embedded user messages to each context; writes nothing to a
# context that is gone (scrubbed or expired) and skips seqs already embedded. With a frame
# (the batch's rows sealed as one value, length-prefixed), the context's `vec` is a string of
# frames (meta `vfmt` 's'), and a batch holding a seq already embedded is refused whole (-2:
# the caller drops those seqs and seals again). Returns per context how many vectors were
# added, -1 when the context's vectors are of another model (or of an unnamed one, written
# before vectors carried their model): vectors of two spaces never share a context; -3 when
# the batch's form (sealed or clear) is not the one the context's vectors already have. Ends
# a re-embedding ('vre') once every queued message is accounted for. One call writes several
# contexts: the script's own cost (its constants and helpers, the call) is paid once.


class AddVectorsArgs(NamedTuple):
    """The add-vectors script's ARGV, in order."""

    ttl: int  # ms
    new_model: str  # the vectors' model
    new_dims: int  # their dimensions
    contexts: Sequence[bytes | int | str]  # each context's VectorRows, spread


class VectorRows(NamedTuple):
    """One context's part of the add-vectors script's ARGV."""

    skipped: int
    frame: bytes  # a sealed frame, '-' (sealed, no vector) or '' (clear)
    row_count: int  # how many rows follow
    # Per vector: seq (uint32 LE bytes), seq (number), float32 bytes ('' with a frame).
    rows: Sequence[bytes | int]


_ADD_VECTORS = (
    _CONSTANTS
    + _CONTEXT_KEYS
    + _SLIDING_TTL
    + _BIND_CONTEXT
    + _lua_args(AddVectorsArgs)
    + _ADD_CONTEXT_VECTORS
    + """
local replies, at = {}, contexts_from
for base = 0, #KEYS - 1, CONTEXT_KEY_COUNT do
  bind(base)
  local rows_end = at + 2 + 3 * tonumber(ARGV[at + 2])
  replies[#replies + 1] = add(ARGV[at], ARGV[at + 1], at + 3, rows_end)
  flush_meta()
  at = rows_end + 1
end
return replies
"""
)

# ARGV: ResetVectorsArgs. Starts re-embedding a context whose vectors are of another
# model: drops them, names the new model, starts a new generation ('vgen', so searching
# processes drop what they hold of the old one), marks the context 'vre' (searched by words
# until done) and counts the messages queued again plus any queued since the listing. Returns 1
# when it started, 0 when the vectors are already of that model (or none was ever written), -1
# when the context is gone.


class ResetVectorsArgs(NamedTuple):
    """The reset-vectors script's ARGV, in order."""

    ttl: int  # ms
    new_model: str  # the model the context's vectors are re-embedded with
    requeued: int  # how many messages the caller queues again
    listed: int  # the context's 'embq' when the caller listed them


_RESET_VECTORS = (
    _PRELUDE
    + _lua_args(ResetVectorsArgs)
    + """
if redis.call('EXISTS', META) == 0 then return -1 end
local model, dims, queued = unpack(redis.call('HMGET', META, M_VECTOR_MODEL, M_VECTOR_DIMS,
                                              M_EMBED_QUEUED))
if model == new_model or not (model or dims) then return 0 end
redis.call('DEL', VECTORS, VECTOR_SEQS, VECTOR_BITS)
redis.call('HDEL', META, M_VECTOR_DIMS, M_VECTOR_FORM)
local since = tonumber(queued or '0') - tonumber(listed)
redis.call('HSET', META, M_VECTOR_MODEL, new_model, M_REEMBEDDING, 1, M_EMBEDDED, 0,
           M_EMBED_QUEUED, tonumber(requeued) + since)
redis.call('HINCRBY', META, M_VECTOR_GENERATION, 1)
touch(tonumber(ttl))
return 1
"""
)

# ARGV: ScrubArgs.
# Deletes every key of the context and its entries in the user's indexes, drops its queued
# jobs, and tells runners of unfinished tasks to stop. With a forget job, the ids in the
# context's ledger go to the outbox as one 'forget' job, queued even when the ledger is empty
# (it also sweeps the context's session in Cortadel); on a cluster the ids are returned for
# the caller to queue the job.
# Reply: ``replies.scrub_reply`` (its counts are the scrub's receipt, for the audit trail).


class ScrubArgs(NamedTuple):
    """The scrub script's ARGV, in order."""

    cid: str
    forget_job: bytes  # long-term memory job json, or '' to leave Cortadel's memories alone
    ttl: int  # ms: how long the context's id stays unknown (its tombstone lives)


_SCRUB = (
    _PRELUDE
    + _lua_args(ScrubArgs)
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

# KEYS: 1 context meta 2 seen (zset). ARGV: RememberArgs.
# Remembers the ids recalled into this context (the oldest beyond the cap are forgotten).
# Reply: ``replies.remember_reply``. Nothing is written once the context is gone.


class RememberArgs(NamedTuple):
    """The remember script's ARGV, in order."""

    now: int  # ms
    keep: int  # how many ids to keep
    ids: Sequence[str]  # the recalled ids (the rest of ARGV)


_REMEMBER = (
    _lua_args(RememberArgs)
    + """
local META, SEEN = KEYS[1], KEYS[2]
local ttl = redis.call('PTTL', META)
if ttl < 0 then return {} end
local fresh = {}
for i = ids_from, #ARGV do
  if not redis.call('ZSCORE', SEEN, ARGV[i]) then fresh[#fresh + 1] = ARGV[i] end
  redis.call('ZADD', SEEN, now, ARGV[i])
end
local excess = redis.call('ZCARD', SEEN) - tonumber(keep)
if excess > 0 then redis.call('ZREMRANGEBYRANK', SEEN, 0, excess - 1) end
redis.call('PEXPIRE', SEEN, ttl)
return fresh
"""
)

# KEYS: 1 context meta 2 ledger (set). ARGV: memory ids Cortadel added from the context.
# Returns 1, or 0 when the context is gone (scrubbed or expired: the caller deletes them).
_LEDGER = """
local META, LEDGER = KEYS[1], KEYS[2]
local ttl = redis.call('PTTL', META)
if ttl < 0 then return 0 end
redis.call('SADD', LEDGER, unpack(ARGV))
redis.call('PEXPIRE', LEDGER, ttl)
return 1
"""


# KEYS: 1 a context's meta 2 its vectors. ARGV: RewriteVectorsArgs. Replaces the stored
# vectors unless vectors were added or reset meanwhile, keeping the expiry, and starts a new
# generation (searching processes read the new layout whole). Returns the new generation,
# or 0 when it changed nothing.


class RewriteVectorsArgs(NamedTuple):
    """The rewrite-vectors script's ARGV, in order."""

    length: int  # the vectors' length when read
    generation: int  # their generation ('vgen') when read
    rows: bytes  # the same rows in another layout: one sealed frame, or clear rows
    form: str  # 's' (sealed) or '' (clear)


_REWRITE_VECTORS = (
    _CONSTANTS
    + _lua_args(RewriteVectorsArgs)
    + """
local META, VECTORS = KEYS[1], KEYS[2]
if redis.call('STRLEN', VECTORS) ~= tonumber(length) then return 0 end
local current = redis.call('HGET', META, M_VECTOR_GENERATION) or '0'
if tonumber(current) ~= tonumber(generation) then return 0 end
redis.call('SET', VECTORS, rows, 'KEEPTTL')
if form == 's' then
  redis.call('HSET', META, M_VECTOR_FORM, 's')
else
  redis.call('HDEL', META, M_VECTOR_FORM)
end
return redis.call('HINCRBY', META, M_VECTOR_GENERATION, 1)
"""
)


# KEYS: 1 the context's tasks hash. ARGV: RecordJobArgs.
# Cluster mode: records a queued job's entry in place of the task's 'pending:<seq>' mark,
# unless its run has begun (and recorded it) or settled meanwhile.


class RecordJobArgs(NamedTuple):
    """The record-job script's ARGV, in order."""

    tid: str
    seq: int
    entry: str


_RECORD_JOB = (
    _CONSTANTS
    + _lua_args(RecordJobArgs)
    + """
local TASKS = KEYS[1]
if redis.call('HGET', TASKS, tid .. F_JOB) == PENDING_MARK .. seq then
  redis.call('HSET', TASKS, tid .. F_JOB, entry)
end
return 1
"""
)


# Push configs of a task (context keys). ARGV: PushConfigArgs.
# Reply: ``replies.push_config_reply``. A delete of a config the task does not have is 'ok'
# (deleting is idempotent).


class PushConfigArgs(NamedTuple):
    """The push-config script's ARGV, in order."""

    tid: str
    id: str  # the config's id
    config: bytes  # json, or '' to delete the config
    ttl: int  # ms
    most: int  # most configs a task may have


_PUSH_CONFIG = (
    _PRELUDE
    + _lua_args(PushConfigArgs)
    + """
if redis.call('EXISTS', META) == 0 then return {'notask'} end
if redis.call('HEXISTS', TASKS, tid .. F_STATE) == 0 then return {'notask'} end
if config ~= '' then
  if not push_room(tid, id, tonumber(most)) then return {'full'} end
  push_set(tid, id, config)
else
  local kept = {}
  for i in string.gmatch(redis.call('HGET', TASKS, tid .. F_PUSH_IDS) or '', '[^,]+') do
    if i ~= id then kept[#kept + 1] = i end
  end
  redis.call('HDEL', TASKS, tid .. F_PUSH_CONFIG .. id)
  if #kept > 0 then redis.call('HSET', TASKS, tid .. F_PUSH_IDS, table.concat(kept, ','))
  else redis.call('HDEL', TASKS, tid .. F_PUSH_IDS) end
end
touch(tonumber(ttl))
return {'ok'}
"""
)


class TakePushesArgs(NamedTuple):
    """The take-pushes script's ARGV, in order."""

    now: int  # ms
    lease: int  # ms
    which: str  # 'all' (the writer's second step: every delivery not taken) or 'stale' (the
    # sweep: only those queued or taken more than a lease ago)
    most: int  # most to take


# KEYS: 1 a context's pending deliveries ('<meta key>:push', cluster mode). ARGV:
# TakePushesArgs. Takes deliveries to move to the stream: each is marked taken now, so no
# other mover takes it within the lease; one whose mover died is taken again after it.
# Reply: ``replies.take_pushes_reply``.
_TAKE_PUSHES = (
    _lua_args(TakePushesArgs)
    + """
local PENDING = KEYS[1]
now, lease = tonumber(now), tonumber(lease)
local low = '-inf'
if which == 'stale' then low = lease - now end
local taken = redis.call('ZRANGEBYSCORE', PENDING, low, now - lease, 'LIMIT', 0, tonumber(most))
for _, job in ipairs(taken) do redis.call('ZADD', PENDING, 'XX', now, job) end
return taken
"""
)


# Rate limits (GCRA). KEYS: the limits a request counts against (a principal's and its
# tenant's share one slot; or a client address's failed authentications). ARGV: per key, its
# emission interval and its tolerance (the window), in ms; then how many requests to charge
# (absent: 1; a JSON-RPC batch charges its calls at once). A key holds the theoretical
# arrival time (TAT) of the next request; a request passes unless TAT + interval - window
# is still ahead. As many of the requests pass as every limit lets through (the first ones),
# and each limit is charged for those; none passes: none is charged.
# Returns {allowed 1|0 (all passed), retry after ms (for the next one, when not all passed),
# then per key: remaining, ms until replenished; then how many passed}.
_RATE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local count = tonumber(ARGV[2 * #KEYS + 1] or 1)
local passed, tats = count, {}
for i = 1, #KEYS do
  local interval, window = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', KEYS[i]) or now)
  if tat < now then tat = now end
  tats[i] = tat
  local k = math.floor((window + now - tat) / interval)
  if k > count then k = count end
  if k < 0 then k = 0 end
  while k < count and tat + (k + 1) * interval - window - now <= 0 do k = k + 1 end
  while k > 0 and tat + k * interval - window - now > 0 do k = k - 1 end
  if k < passed then passed = k end
end
local out, retry = {1, 0}, 0
if passed < count then out[1] = 0 end
for i = 1, #KEYS do
  local interval, window = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local tat = tats[i] + passed * interval
  if passed > 0 then
    redis.call('SET', KEYS[i], string.format('%.3f', tat), 'PX', math.ceil(tat - now))
  end
  if passed < count then
    local wait = tat + interval - window - now
    if wait > retry then retry = wait end
  end
  out[2 * i + 1] = math.floor((window - (tat - now)) / interval)
  out[2 * i + 2] = math.ceil(tat - now)
end
out[2] = math.ceil(retry)
out[2 * #KEYS + 3] = passed
return out
"""


# KEYS: 1 a managed API key's record. ARGV: UseApiKeyArgs. Marks the key used now and returns
# its record (HGETALL), or nothing when there is no such key (none is created).


class UseApiKeyArgs(NamedTuple):
    """The use-api-key script's ARGV, in order."""

    now: int  # ms


_USE_API_KEY = (
    _lua_args(UseApiKeyArgs)
    + """
local RECORD = KEYS[1]
if redis.call('EXISTS', RECORD) == 0 then return {} end
redis.call('HSET', RECORD, 'last_used', now)
return redis.call('HGETALL', RECORD)
"""
)


class SnapshotArgs(NamedTuple):
    """The snapshot script's ARGV, in order."""

    logged: str  # the task's LOGGED field
    fields: Sequence[str]  # the task's fields to read (``replies.SNAPSHOT_FIELDS``, status first)


# KEYS: 1 the context's tasks hash 2 the task's event stream. ARGV: SnapshotArgs.
# A task as it stands and the id of the last event it includes, read at one instant: events
# after that id are news to a reader that starts from this snapshot. A task is logged from
# its first reader on: the snapshot marks it (a task that exists: the status is the first
# field read), and every change written after it goes to the log. Reply:
# ``replies.snapshot_reply``.
_SNAPSHOT = (
    f"local NO_EVENT = {_lua_value(f.NO_EVENT)}\n"
    + _lua_args(SnapshotArgs)
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


# -- the job streams (``jobs.py``) ----------------------------------------------------------


class LeadArgs(NamedTuple):
    """The lead script's ARGV, in order."""

    node: str  # the process asking for the lead
    ttl: int  # ms the lead lasts unless renewed


# KEYS: 1 the maintenance leader. ARGV: LeadArgs. Takes the lead, or keeps it if already
# ours (renewed); takes nothing from another holder. Returns 1 when ``node`` holds it.
_LEAD = (
    _lua_args(LeadArgs)
    + """
local LEADER = KEYS[1]
local holder = redis.call('GET', LEADER)
if holder == false then
  redis.call('SET', LEADER, node, 'PX', ttl)
  return 1
end
if holder == node then
  redis.call('PEXPIRE', LEADER, ttl)
  return 1
end
return 0
"""
)


class ResignArgs(NamedTuple):
    """The resign script's ARGV, in order."""

    node: str


# KEYS: 1 the maintenance leader. ARGV: ResignArgs. Gives the lead up, if it is ours.
_RESIGN = (
    _lua_args(ResignArgs)
    + """
local LEADER = KEYS[1]
if redis.call('GET', LEADER) == node then return redis.call('DEL', LEADER) end
return 0
"""
)


class LeaveArgs(NamedTuple):
    """The leave script's ARGV, in order."""

    group: str
    consumer: str  # the consumer leaving
    heir: str  # the consumer its pending entries go to


# KEYS: 1 the stream. ARGV: LeaveArgs. Hands a leaving consumer's pending entries to the heir
# with a fresh lease (as a last heartbeat would), then deletes the consumer. Returns how many
# entries were handed over.
_LEAVE = (
    _lua_args(LeaveArgs)
    + """
local STREAM = KEYS[1]
local ok, rows = pcall(redis.call, 'XPENDING', STREAM, group, '-', '+', 200, consumer)
if not ok then return 0 end
local moved = 0
while #rows > 0 do
  for _, row in ipairs(rows) do
    redis.call('XCLAIM', STREAM, group, heir, 0, row[1], 'JUSTID')
    moved = moved + 1
  end
  rows = redis.call('XPENDING', STREAM, group, '(' .. rows[#rows][1], '+', 200, consumer)
end
redis.call('XGROUP', 'DELCONSUMER', STREAM, group, consumer)
return moved
"""
)


class DropIdleArgs(NamedTuple):
    """The drop-idle script's ARGV, in order."""

    group: str
    consumer: str


# KEYS: 1 the stream. ARGV: DropIdleArgs. Deletes a consumer only if it holds no pending
# entry: checked and done in one step, so no claim can slip in between (DELCONSUMER drops
# the pending entries of a consumer). Returns 1 when it was deleted.
_DROP_IDLE = (
    _lua_args(DropIdleArgs)
    + """
local STREAM = KEYS[1]
if #redis.call('XPENDING', STREAM, group, '-', '+', 1, consumer) > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', STREAM, group, consumer)
return 1
"""
)


class ForgetDeadArgs(NamedTuple):
    """The forget-dead script's ARGV, in order."""

    tenant: str
    user: str
    cid: str
    start: str  # the first entry id to read ('-', or '(<id>' after the last one read)
    most: int  # how many entries to read


# KEYS: 1 the dead letters. ARGV: ForgetDeadArgs. Deletes, among up to `most` dead letters
# from `start` on, those of one context: whose job names the tenant, user and context, or
# cannot be read and mentions the context id. Reply: ``replies.forget_dead_reply``.
_FORGET_DEAD = (
    _CONSTANTS
    + _lua_args(ForgetDeadArgs)
    + """
local DEAD = KEYS[1]
local entries = redis.call('XRANGE', DEAD, start, '+', 'COUNT', most)
local doomed = {}
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == E_JOB and string.find(fields[i + 1], cid, 1, true) then
      local ok, job = pcall(cjson.decode, fields[i + 1])
      if not ok or type(job) ~= 'table'
          or (job.t == tenant and job.u == user and job.c == cid) then
        doomed[#doomed + 1] = entry[1]
      end
    end
  end
end
if #doomed > 0 then redis.call('XDEL', DEAD, unpack(doomed)) end
local last = entries[#entries]
return {#doomed, #entries, last and last[1] or ''}
"""
)


# -- the agent registry (``agents_store.py``) ----------------------------------------------


class CreateAgentArgs(NamedTuple):
    """The create-agent script's ARGV, in order."""

    entry: bytes  # the entry json (sealed)
    ttl: int  # ms, or 0: permanent


# KEYS: 1 the tenant's agent index 2 the entry. ARGV: CreateAgentArgs. Creates the entry
# unless it exists. Returns 1 when it was created.
_CREATE_AGENT = (
    _lua_args(CreateAgentArgs)
    + """
local INDEX, ENTRY = KEYS[1], KEYS[2]
if redis.call('EXISTS', ENTRY) == 1 then return 0 end
if ttl ~= '0' then redis.call('SET', ENTRY, entry, 'PX', ttl)
else redis.call('SET', ENTRY, entry) end
redis.call('SADD', INDEX, ENTRY)
return 1
"""
)


class ReadAgentArgs(NamedTuple):
    """The read-agent script's ARGV, in order."""

    ttl: int  # ms


# KEYS: 1 the entry. ARGV: ReadAgentArgs. Returns the entry (nil when there is none); an
# ephemeral one's TTL slides.
_READ_AGENT = (
    _lua_args(ReadAgentArgs)
    + """
local ENTRY = KEYS[1]
local entry = redis.call('GET', ENTRY)
if entry and redis.call('PTTL', ENTRY) > 0 then redis.call('PEXPIRE', ENTRY, ttl) end
return entry
"""
)


class ReplaceAgentArgs(NamedTuple):
    """The replace-agent script's ARGV, in order."""

    read: bytes  # the stored entry as the caller read it
    entry: bytes  # the new entry (sealed)
    ttl: int  # ms


# KEYS: 1 the entry. ARGV: ReplaceAgentArgs. Replaces the entry if it is still the one read,
# keeping it ephemeral if it was. Returns 'ok', 'conflict' (it changed) or 'gone'.
_REPLACE_AGENT = (
    _lua_args(ReplaceAgentArgs)
    + """
local ENTRY = KEYS[1]
local stored = redis.call('GET', ENTRY)
if not stored then return 'gone' end
if stored ~= read then return 'conflict' end
if redis.call('PTTL', ENTRY) > 0 then redis.call('SET', ENTRY, entry, 'PX', ttl)
else redis.call('SET', ENTRY, entry) end
return 'ok'
"""
)


# -- key rotation (``rotation.py``): compare-and-set of values re-sealed -------------------


class SwapFieldsArgs(NamedTuple):
    """The swap-fields script's ARGV, in order."""

    swaps: Sequence[bytes]  # per field: its name, the value read, the new value


# KEYS: 1 a hash. ARGV: SwapFieldsArgs. Replaces each field still holding the value read.
# Returns how many were replaced.
_SWAP_FIELDS = (
    _lua_args(SwapFieldsArgs)
    + """
local HASH = KEYS[1]
local n = 0
for i = swaps_from, #ARGV, 3 do
  if redis.call('HGET', HASH, ARGV[i]) == ARGV[i + 1] then
    redis.call('HSET', HASH, ARGV[i], ARGV[i + 2])
    n = n + 1
  end
end
return n
"""
)


class SwapStringArgs(NamedTuple):
    """The swap-string script's ARGV, in order."""

    read: bytes  # the value read
    new: bytes


# KEYS: 1 a string. ARGV: SwapStringArgs. Replaces it if it is still the value read, keeping
# its TTL. Returns 1 if it was replaced.
_SWAP_STRING = (
    _lua_args(SwapStringArgs)
    + """
local VALUE = KEYS[1]
if redis.call('GET', VALUE) ~= read then return 0 end
redis.call('SET', VALUE, new, 'KEEPTTL')
return 1
"""
)


class SwapLogArgs(NamedTuple):
    """The swap-log script's ARGV, in order."""

    swaps: Sequence[bytes]  # per entry: its id, the data read, the new data


# KEYS: 1 a task's event stream. ARGV: SwapLogArgs. A stream's entries cannot be changed in
# place: the log is written again, each entry under its own id (so readers' Last-Event-IDs
# still hold), the given entries' data replaced when it is still the value read. Entries
# added since it was read are kept as they are (a new write is current); a log expired or
# scrubbed meanwhile stays gone. The TTL is kept. Returns how many were replaced.
_SWAP_LOG = (
    _CONSTANTS
    + _lua_args(SwapLogArgs)
    + """
local LOG = KEYS[1]
local entries = redis.call('XRANGE', LOG, '-', '+')
if #entries == 0 then return 0 end
local new = {}
for i = swaps_from, #ARGV, 3 do new[ARGV[i]] = {ARGV[i + 1], ARGV[i + 2]} end
local ttl = redis.call('PTTL', LOG)
redis.call('DEL', LOG)
local n = 0
for _, entry in ipairs(entries) do
  local fields, swap = entry[2], new[entry[1]]
  for j = 1, #fields, 2 do
    if swap and fields[j] == EV_DATA and fields[j + 1] == swap[1] then
      fields[j + 1] = swap[2]
      n = n + 1
    end
  end
  redis.call('XADD', LOG, entry[1], unpack(fields))
end
if ttl > 0 then redis.call('PEXPIRE', LOG, ttl) end
return n
"""
)


@dataclass(frozen=True)
class Scripts:
    send: AsyncScript
    begin_run: AsyncScript
    update: AsyncScript
    cancel: AsyncScript
    scrub: AsyncScript
    add_vectors: AsyncScript
    rewrite_vectors: AsyncScript
    reset_vectors: AsyncScript
    remember: AsyncScript
    ledger: AsyncScript
    record_job: AsyncScript
    rate: AsyncScript
    use_api_key: AsyncScript
    snapshot: AsyncScript
    push_config: AsyncScript
    take_pushes: AsyncScript
    lead: AsyncScript
    resign: AsyncScript
    leave: AsyncScript
    drop_idle: AsyncScript
    forget_dead: AsyncScript
    create_agent: AsyncScript
    read_agent: AsyncScript
    replace_agent: AsyncScript
    swap_fields: AsyncScript
    swap_string: AsyncScript
    swap_log: AsyncScript

    @classmethod
    def register(cls, client: Any) -> Scripts:
        return cls(
            send=client.register_script(_SEND),
            begin_run=client.register_script(_BEGIN_RUN),
            update=client.register_script(_UPDATE),
            cancel=client.register_script(_CANCEL),
            scrub=client.register_script(_SCRUB),
            add_vectors=client.register_script(_ADD_VECTORS),
            rewrite_vectors=client.register_script(_REWRITE_VECTORS),
            reset_vectors=client.register_script(_RESET_VECTORS),
            remember=client.register_script(_REMEMBER),
            ledger=client.register_script(_LEDGER),
            record_job=client.register_script(_RECORD_JOB),
            rate=client.register_script(_RATE),
            use_api_key=client.register_script(_USE_API_KEY),
            snapshot=client.register_script(_SNAPSHOT),
            push_config=client.register_script(_PUSH_CONFIG),
            take_pushes=client.register_script(_TAKE_PUSHES),
            lead=client.register_script(_LEAD),
            resign=client.register_script(_RESIGN),
            leave=client.register_script(_LEAVE),
            drop_idle=client.register_script(_DROP_IDLE),
            forget_dead=client.register_script(_FORGET_DEAD),
            create_agent=client.register_script(_CREATE_AGENT),
            read_agent=client.register_script(_READ_AGENT),
            replace_agent=client.register_script(_REPLACE_AGENT),
            swap_fields=client.register_script(_SWAP_FIELDS),
            swap_string=client.register_script(_SWAP_STRING),
            swap_log=client.register_script(_SWAP_LOG),
        )
