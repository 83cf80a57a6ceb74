"""The prelude of the context scripts: the Lua every script of one context starts with.

``PRELUDE`` is the generated names (``contract.CONSTANTS``), the context's key locals, the
sliding TTL (``touch``), the meta writes gathered into one HSET (``set_meta``,
``flush_meta``), the runs' helpers (``ack``, ``fence``, ``run_inputs``...), the task event
streams (``emit``) and webhook deliveries (``notify``). A script of several contexts binds
each in turn (``BIND_CONTEXT``).
"""

from __future__ import annotations

from gateway.store.lua.contract import CONSTANTS, CONTEXT_KEYS, context_keys_from

__all__ = ["BIND_CONTEXT", "PRELUDE", "SLIDING_TTL"]

SLIDING_TTL = """
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
BIND_CONTEXT = (
    "local function bind(base)\n  "
    + context_keys_from("base + ")
    + "  KEY_BASE, META_LEFT = base, nil\nend\n"
)
# The runs' helpers: the job streams, settling, fencing and a run's inputs.
_RUNS = """
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
"""
_EVENTS = """
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

# Push notifications (``gateway/push``). The deliveries stream is the last key. On a cluster
# it is in another slot, so a delivery waits in the context's own zset '<meta key>:push'
# (member: the delivery's json; score: minus the ms it was queued, until a mover takes it,
# then when it was taken) and the script returns 'push' where its reply says so: the store
# then moves it to the stream (``Store.move_pushes``), or maintenance does after a crash
# between the two steps. A task's webhooks are fields of the tasks hash:
# `<tid>:pn` lists their ids ('a,b'), `<tid>:pn:<id>` holds each config (JSON, with the
# principal's `t`/`u` and `a` when it wants artifact updates); `<tid>:pe` counts the task's
# events, so each has a stable id (`<tid>.<n>`) a receiver can dedupe on.
_PUSHES = """
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

PRELUDE = CONSTANTS + CONTEXT_KEYS + SLIDING_TTL + _RUNS + _EVENTS + _PUSHES
