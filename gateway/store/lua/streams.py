"""The scripts of the job streams (``store/jobs.py``): the maintenance lead taken and given
up, a consumer's pending entries handed over or an idle consumer dropped, and a context's
dead letters forgotten (``forget_dead_reply``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.store.lua.contract import CONSTANTS, ScriptArgs, text

__all__ = [
    "DROP_IDLE",
    "FORGET_DEAD",
    "LEAD",
    "LEAVE",
    "RESIGN",
    "DropIdleArgs",
    "ForgetDeadArgs",
    "ForgetDeadReply",
    "LeadArgs",
    "LeaveArgs",
    "ResignArgs",
    "forget_dead_reply",
]


@dataclass(slots=True)
class LeadArgs(ScriptArgs):
    """The lead script's ARGV, in order."""

    node: str  # the process asking for the lead
    ttl: int  # ms the lead lasts unless renewed


# KEYS: 1 the maintenance leader. ARGV: LeadArgs. Takes the lead, or keeps it if already
# ours (renewed); takes nothing from another holder. Returns 1 when ``node`` holds it.
LEAD = (
    LeadArgs.lua()
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


@dataclass(slots=True)
class ResignArgs(ScriptArgs):
    """The resign script's ARGV, in order."""

    node: str


# KEYS: 1 the maintenance leader. ARGV: ResignArgs. Gives the lead up, if it is ours.
RESIGN = (
    ResignArgs.lua()
    + """
local LEADER = KEYS[1]
if redis.call('GET', LEADER) == node then return redis.call('DEL', LEADER) end
return 0
"""
)


@dataclass(slots=True)
class LeaveArgs(ScriptArgs):
    """The leave script's ARGV, in order."""

    group: str
    consumer: str  # the consumer leaving
    heir: str  # the consumer its pending entries go to


# KEYS: 1 the stream. ARGV: LeaveArgs. Hands a leaving consumer's pending entries to the heir
# with a fresh lease (as a last heartbeat would), then deletes the consumer. Returns how many
# entries were handed over.
LEAVE = (
    LeaveArgs.lua()
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


@dataclass(slots=True)
class DropIdleArgs(ScriptArgs):
    """The drop-idle script's ARGV, in order."""

    group: str
    consumer: str


# KEYS: 1 the stream. ARGV: DropIdleArgs. Deletes a consumer only if it holds no pending
# entry: checked and done in one step, so no claim can slip in between (DELCONSUMER drops
# the pending entries of a consumer). Returns 1 when it was deleted.
DROP_IDLE = (
    DropIdleArgs.lua()
    + """
local STREAM = KEYS[1]
if #redis.call('XPENDING', STREAM, group, '-', '+', 1, consumer) > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', STREAM, group, consumer)
return 1
"""
)


@dataclass(slots=True)
class ForgetDeadArgs(ScriptArgs):
    """The forget-dead script's ARGV, in order."""

    tenant: str
    user: str
    cid: str
    start: str  # the first entry id to read ('-', or '(<id>' after the last one read)
    most: int  # how many entries to read


# KEYS: 1 the dead letters. ARGV: ForgetDeadArgs. Deletes, among up to `most` dead letters
# from `start` on, those of one context: whose job names the tenant, user and context, or
# cannot be read and mentions the context id. Reply: ``forget_dead_reply``.
FORGET_DEAD = (
    CONSTANTS
    + ForgetDeadArgs.lua()
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


@dataclass(frozen=True, slots=True)
class ForgetDeadReply:
    """One chunk of dead letters looked at: how many were deleted, how many read, and the
    id of the last one read ('' when none was)."""

    deleted: int
    read: int
    last: str


def forget_dead_reply(reply: list[Any]) -> ForgetDeadReply:
    return ForgetDeadReply(int(reply[0]), int(reply[1]), text(reply[2]))
