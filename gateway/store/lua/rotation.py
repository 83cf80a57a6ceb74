"""The scripts of key rotation (``store/rotation.py``): compare-and-set of values sealed
again, in a hash, a string and a task's event stream. Each returns how many values it
replaced."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.store.lua.contract import CONSTANTS, ScriptArgs

__all__ = [
    "SWAP_FIELDS",
    "SWAP_LOG",
    "SWAP_STRING",
    "SwapFieldsArgs",
    "SwapLogArgs",
    "SwapStringArgs",
]


@dataclass(slots=True)
class SwapFieldsArgs(ScriptArgs):
    """The swap-fields script's ARGV, in order."""

    swaps: Sequence[bytes]  # per field: its name, the value read, the new value


# KEYS: 1 a hash. ARGV: SwapFieldsArgs. Replaces each field still holding the value read.
# Returns how many were replaced.
SWAP_FIELDS = (
    SwapFieldsArgs.lua()
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


@dataclass(slots=True)
class SwapStringArgs(ScriptArgs):
    """The swap-string script's ARGV, in order."""

    read: bytes  # the value read
    new: bytes


# KEYS: 1 a string. ARGV: SwapStringArgs. Replaces it if it is still the value read, keeping
# its TTL. Returns 1 if it was replaced.
SWAP_STRING = (
    SwapStringArgs.lua()
    + """
local VALUE = KEYS[1]
if redis.call('GET', VALUE) ~= read then return 0 end
redis.call('SET', VALUE, new, 'KEEPTTL')
return 1
"""
)


@dataclass(slots=True)
class SwapLogArgs(ScriptArgs):
    """The swap-log script's ARGV, in order."""

    swaps: Sequence[bytes]  # per entry: its id, the data read, the new data


# KEYS: 1 a task's event stream. ARGV: SwapLogArgs. A stream's entries cannot be changed in
# place: the log is written again, each entry under its own id (so readers' Last-Event-IDs
# still hold), the given entries' data replaced when it is still the value read. Entries
# added since it was read are kept as they are (a new write is current); a log expired or
# scrubbed meanwhile stays gone. The TTL is kept. Returns how many were replaced.
SWAP_LOG = (
    CONSTANTS
    + SwapLogArgs.lua()
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
