"""The scripts of a tenant's agent registry (``store/agents_store.py``): an entry created
unless it exists, read (an ephemeral one's TTL slides), and replaced if unchanged since it
was read. Their replies are scalars, read where they are used."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.store.lua.contract import ScriptArgs

__all__ = [
    "CREATE_AGENT",
    "READ_AGENT",
    "REPLACE_AGENT",
    "CreateAgentArgs",
    "ReadAgentArgs",
    "ReplaceAgentArgs",
]


@dataclass(slots=True)
class CreateAgentArgs(ScriptArgs):
    """The create-agent script's ARGV, in order."""

    entry: bytes  # the entry json (sealed)
    ttl: int  # ms, or 0: permanent


# KEYS: 1 the tenant's agent index 2 the entry. ARGV: CreateAgentArgs. Creates the entry
# unless it exists. Returns 1 when it was created.
CREATE_AGENT = (
    CreateAgentArgs.lua()
    + """
local INDEX, ENTRY = KEYS[1], KEYS[2]
if redis.call('EXISTS', ENTRY) == 1 then return 0 end
if ttl ~= '0' then redis.call('SET', ENTRY, entry, 'PX', ttl)
else redis.call('SET', ENTRY, entry) end
redis.call('SADD', INDEX, ENTRY)
return 1
"""
)


@dataclass(slots=True)
class ReadAgentArgs(ScriptArgs):
    """The read-agent script's ARGV, in order."""

    ttl: int  # ms


# KEYS: 1 the entry. ARGV: ReadAgentArgs. Returns the entry (nil when there is none); an
# ephemeral one's TTL slides.
READ_AGENT = (
    ReadAgentArgs.lua()
    + """
local ENTRY = KEYS[1]
local entry = redis.call('GET', ENTRY)
if entry and redis.call('PTTL', ENTRY) > 0 then redis.call('PEXPIRE', ENTRY, ttl) end
return entry
"""
)


@dataclass(slots=True)
class ReplaceAgentArgs(ScriptArgs):
    """The replace-agent script's ARGV, in order."""

    read: bytes  # the stored entry as the caller read it
    entry: bytes  # the new entry (sealed)
    ttl: int  # ms


# KEYS: 1 the entry. ARGV: ReplaceAgentArgs. Replaces the entry if it is still the one read,
# keeping it ephemeral if it was. Returns 'ok', 'conflict' (it changed) or 'gone'.
REPLACE_AGENT = (
    ReplaceAgentArgs.lua()
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
