"""The scripts of long-term memory's traces in a context (``store/longterm_store.py``): the
memories recalled into it (``REMEMBER``, read by ``remember_reply``) and those Cortadel added
from it (``LEDGER``). Neither writes once the context is gone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.store.lua.contract import ScriptArgs, text

__all__ = ["LEDGER", "REMEMBER", "LedgerArgs", "RememberArgs", "remember_reply"]

# KEYS: 1 context meta 2 seen (zset). ARGV: RememberArgs.
# Remembers the ids recalled into this context (the oldest beyond the cap are forgotten).
# Reply: ``remember_reply``. Nothing is written once the context is gone.


@dataclass(slots=True)
class RememberArgs(ScriptArgs):
    """The remember script's ARGV, in order."""

    now: int  # ms
    keep: int  # how many ids to keep
    ids: Sequence[str]  # the recalled ids (the rest of ARGV)


REMEMBER = (
    RememberArgs.lua()
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


@dataclass(slots=True)
class LedgerArgs(ScriptArgs):
    """The ledger script's ARGV, in order."""

    ids: Sequence[str]  # the memory ids Cortadel added from the context (the rest of ARGV)


# KEYS: 1 context meta 2 ledger (set). ARGV: LedgerArgs. Returns 1, or 0 when the context is
# gone (scrubbed or expired: the caller deletes them).
LEDGER = (
    LedgerArgs.lua()
    + """
local META, LEDGER = KEYS[1], KEYS[2]
local ttl = redis.call('PTTL', META)
if ttl < 0 then return 0 end
redis.call('SADD', LEDGER, unpack(ARGV, ids_from))
redis.call('PEXPIRE', LEDGER, ttl)
return 1
"""
)


def remember_reply(reply: list[Any]) -> set[str]:
    """The ids not recalled into the context before."""
    return {text(i) for i in reply}
