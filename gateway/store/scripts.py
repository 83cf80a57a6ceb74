"""Every Lua script of the store, registered once per client.

Each context script takes the eight keys of ``ContextKeys.all()`` in that order,
so it may read and write the whole context atomically and refresh the sliding
TTL of every key it owns in O(1). A context whose meta key is missing is dead
(scrubbed or expired) and, since ids are never reused, stays dead: every writer
checks the meta key inside its script, so no late write can resurrect it.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

__all__ = ["Scripts"]

# KEYS: 1 ctxs  2 tix  3 orig  4 meta  5 items  6 tasks  7 msgs  8 mids
_PRELUDE = """
local TERMINAL = {completed = true, canceled = true, failed = true, rejected = true}
local function touch(ttl)
  for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], ttl) end
end
-- What a run of the agent is given: its message, and the (header-less) status and
-- artifacts of the referenced tasks. Earlier messages are loaded only if the agent asks.
local function run_inputs(seq, first_ref)
  local msg = redis.call('HGET', KEYS[7], seq)
  local refs = {}
  for i = first_ref, #ARGV do
    refs[#refs + 1] = ARGV[i] .. ':s'
    refs[#refs + 1] = ARGV[i] .. ':a'
  end
  local referenced = {}
  if #refs > 0 then referenced = redis.call('HMGET', KEYS[6], unpack(refs)) end
  return msg, referenced
end
"""

# ARGV: 1 mode(new|continue) 2 cid 3 mid 4 digest 5 tid 6 continuing(1|0) 7 message json
#       8 task metadata json or '' 9 status json 10 now ms 11 ttl ms 12 stale origin
#       13.. reference ids
# Returns {'ok', tid, seq, message, referenced} so the run needs no second read.
_SEND = (
    _PRELUDE
    + """
local mode, cid, mid, digest, tid = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local continuing = ARGV[6] == '1'
local now, ttl = ARGV[10], tonumber(ARGV[11])
if mode == 'new' then
  local origin = redis.call('HGET', KEYS[3], mid)
  if origin and origin ~= ARGV[12] then return {'origin', origin} end
  if redis.call('EXISTS', KEYS[4]) == 1 then return {'collision'} end
else
  if redis.call('EXISTS', KEYS[4]) == 0 then return {'nocontext'} end
  local prior = redis.call('HGET', KEYS[8], mid)
  if prior then
    local sep = string.find(prior, '|', 1, true)
    return {'dup', string.sub(prior, 1, sep - 1), string.sub(prior, sep + 1)}
  end
  if continuing then
    local state = redis.call('HGET', KEYS[6], tid .. ':st')
    if not state then return {'notask'} end
    if TERMINAL[state] then return {'terminal', state} end
  end
end
local unknown = {}
for i = 13, #ARGV do
  if redis.call('HEXISTS', KEYS[6], ARGV[i] .. ':st') == 0 then
    unknown[#unknown + 1] = ARGV[i]
  end
end
if #unknown > 0 then return {'badrefs', unpack(unknown)} end
if mode == 'new' then
  redis.call('HSET', KEYS[4], 'created', now, 'updated', now, 'seq', 0, 'tasks', 0,
             'origin', mid)
  redis.call('HSET', KEYS[3], mid, cid)
end
local seq = redis.call('HINCRBY', KEYS[4], 'seq', 1)
redis.call('HSET', KEYS[7], seq, ARGV[7])
if continuing then
  local seqs = redis.call('HGET', KEYS[6], tid .. ':m')
  redis.call('HSET', KEYS[6], tid .. ':m', seqs .. ',' .. seq,
             tid .. ':st', 'submitted', tid .. ':s', ARGV[9])
else
  redis.call('RPUSH', KEYS[5], tid)
  redis.call('HSET', KEYS[6], tid .. ':st', 'submitted', tid .. ':s', ARGV[9],
             tid .. ':a', '[]', tid .. ':m', seq)
  if ARGV[8] ~= '' then redis.call('HSET', KEYS[6], tid .. ':md', ARGV[8]) end
  redis.call('HSET', KEYS[2], tid, cid)
  redis.call('HINCRBY', KEYS[4], 'tasks', 1)
end
redis.call('HSET', KEYS[8], mid, tid .. '|' .. digest)
redis.call('HSET', KEYS[4], 'updated', now)
redis.call('ZADD', KEYS[1], now, cid)
touch(ttl)
local msg, referenced = run_inputs(seq, 13)
return {'ok', tid, seq, msg, referenced}
"""
)

# ARGV: 1 cid 2 tid 3 state 4 status json 5 artifacts (json objects joined by ',') or ''
#       6 agent message json or '' 7 now ms 8 ttl ms 9 required current state or ''
# Returns {'ok', artifacts json array}, {'skipped'} (state not as required), {'terminal'}
# or {'gone'}. Terminal tasks take no writes: a late result after a cancel is dropped.
_UPDATE = (
    _PRELUDE
    + """
local cid, tid = ARGV[1], ARGV[2]
if redis.call('EXISTS', KEYS[4]) == 0 then return {'gone'} end
local state = redis.call('HGET', KEYS[6], tid .. ':st')
if not state then return {'gone'} end
if TERMINAL[state] then return {'terminal'} end
if ARGV[9] ~= '' and state ~= ARGV[9] then return {'skipped'} end
if ARGV[6] ~= '' then
  local seq = redis.call('HINCRBY', KEYS[4], 'seq', 1)
  redis.call('HSET', KEYS[7], seq, ARGV[6])
  local seqs = redis.call('HGET', KEYS[6], tid .. ':m')
  redis.call('HSET', KEYS[6], tid .. ':m', seqs .. ',' .. seq)
end
local arts = redis.call('HGET', KEYS[6], tid .. ':a')
if ARGV[5] ~= '' then
  if arts == '[]' then arts = '[' .. ARGV[5] .. ']'
  else arts = string.sub(arts, 1, -2) .. ',' .. ARGV[5] .. ']' end
  redis.call('HSET', KEYS[6], tid .. ':a', arts)
end
redis.call('HSET', KEYS[6], tid .. ':st', ARGV[3], tid .. ':s', ARGV[4])
redis.call('HSET', KEYS[4], 'updated', ARGV[7])
redis.call('ZADD', KEYS[1], ARGV[7], cid)
touch(tonumber(ARGV[8]))
redis.call('PUBLISH', 'gw:ev:' .. tid, ARGV[3])
return {'ok', arts}
"""
)

# ARGV: 1 cid 2 tid 3 status json 4 now ms 5 ttl ms
_CANCEL = (
    _PRELUDE
    + """
local cid, tid = ARGV[1], ARGV[2]
if redis.call('EXISTS', KEYS[4]) == 0 then return {'notask'} end
local state = redis.call('HGET', KEYS[6], tid .. ':st')
if not state then return {'notask'} end
if TERMINAL[state] then return {'terminal', state} end
redis.call('HSET', KEYS[6], tid .. ':st', 'canceled', tid .. ':s', ARGV[3])
redis.call('HSET', KEYS[4], 'updated', ARGV[4])
redis.call('ZADD', KEYS[1], ARGV[4], cid)
touch(tonumber(ARGV[5]))
redis.call('PUBLISH', 'gw:ev:' .. tid, 'canceled')
return {'ok'}
"""
)

# ARGV: 1 tid 2 seq 3.. reference ids. Read-only: the inputs of a run that was
# not handed them at send time. {'ok', message, referenced} or {'gone'} / {'terminal'}.
_LOAD_RUN = (
    _PRELUDE
    + """
local tid = ARGV[1]
if redis.call('EXISTS', KEYS[4]) == 0 then return {'gone'} end
local state = redis.call('HGET', KEYS[6], tid .. ':st')
if not state then return {'gone'} end
if TERMINAL[state] then return {'terminal'} end
local msg, referenced = run_inputs(tonumber(ARGV[2]), 3)
return {'ok', msg, referenced}
"""
)

# ARGV: 1 cid. Deletes every key of the context and its entries in the user's indexes;
# tells runners of unfinished tasks to stop.
_SCRUB = (
    _PRELUDE
    + """
local cid = ARGV[1]
if redis.call('EXISTS', KEYS[4]) == 0 then return 0 end
local origin = redis.call('HGET', KEYS[4], 'origin')
if origin and redis.call('HGET', KEYS[3], origin) == cid then
  redis.call('HDEL', KEYS[3], origin)
end
local tids = redis.call('LRANGE', KEYS[5], 0, -1)
for i = 1, #tids do
  redis.call('HDEL', KEYS[2], tids[i])
  local state = redis.call('HGET', KEYS[6], tids[i] .. ':st')
  if state and not TERMINAL[state] then
    redis.call('PUBLISH', 'gw:ev:' .. tids[i], 'canceled')
  end
end
redis.call('DEL', KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8])
redis.call('ZREM', KEYS[1], cid)
return 1
"""
)


@dataclass(frozen=True)
class Scripts:
    send: AsyncScript
    load_run: AsyncScript
    update: AsyncScript
    cancel: AsyncScript
    scrub: AsyncScript

    @classmethod
    def register(cls, client: Redis) -> Scripts:
        return cls(
            send=client.register_script(_SEND),
            load_run=client.register_script(_LOAD_RUN),
            update=client.register_script(_UPDATE),
            cancel=client.register_script(_CANCEL),
            scrub=client.register_script(_SCRUB),
        )
