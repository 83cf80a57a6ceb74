"""The scripts of push notifications (``gateway/push``, ``store/push_store.py``): a task's
webhook configs set and deleted (``PUSH_CONFIG``), and, on a cluster, the deliveries waiting
in a context's slot taken to be moved to the push stream (``TAKE_PUSHES``). The deliveries
themselves are queued by the scripts that change a task (``notify`` in ``prelude.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gateway.store.lua.contract import ScriptArgs, as_bytes, text
from gateway.store.lua.prelude import PRELUDE

__all__ = [
    "PUSH_CONFIG",
    "TAKE_PUSHES",
    "PushConfigArgs",
    "PushConfigOutcome",
    "TakePushesArgs",
    "push_config_reply",
    "take_pushes_reply",
]


# Push configs of a task (context keys). ARGV: PushConfigArgs.
# Reply: ``push_config_reply``. A delete of a config the task does not have is 'ok'
# (deleting is idempotent).


@dataclass(slots=True)
class PushConfigArgs(ScriptArgs):
    """The push-config script's ARGV, in order."""

    tid: str
    id: str  # the config's id
    config: bytes  # json, or '' to delete the config
    ttl: int  # ms
    most: int  # most configs a task may have


PUSH_CONFIG = (
    PRELUDE
    + PushConfigArgs.lua()
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

PushConfigOutcome = Literal["ok", "notask", "full"]


def push_config_reply(reply: list[Any]) -> PushConfigOutcome:
    """'ok', 'notask' (no such task, or its context is gone) or 'full' (the task has the
    most configs it may have)."""
    outcome = text(reply[0])
    if outcome not in ("ok", "notask", "full"):
        raise ValueError(f"unexpected push-config reply: {outcome!r}")
    return outcome  # type: ignore[return-value]


@dataclass(slots=True)
class TakePushesArgs(ScriptArgs):
    """The take-pushes script's ARGV, in order."""

    now: int  # ms
    lease: int  # ms
    which: str  # 'all' (the writer's second step: every delivery not taken) or 'stale' (the
    # sweep: only those queued or taken more than a lease ago)
    most: int  # most to take


# KEYS: 1 a context's pending deliveries ('<meta key>:push', cluster mode). ARGV:
# TakePushesArgs. Takes deliveries to move to the stream: each is marked taken now, so no
# other mover takes it within the lease; one whose mover died is taken again after it.
# Reply: ``take_pushes_reply``.
TAKE_PUSHES = (
    TakePushesArgs.lua()
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


def take_pushes_reply(reply: list[Any]) -> list[bytes]:
    """The deliveries taken (their json), to be moved to the push stream."""
    return as_bytes(reply)
