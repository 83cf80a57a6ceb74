"""The scripts of admission: rate limits (``RATE``, GCRA, for ``store/rate_store.py``) and a
managed API key's use (``USE_API_KEY``, for ``store/apikeys_store.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.store.lua.contract import ScriptArgs

__all__ = ["RATE", "USE_API_KEY", "RateArgs", "UseApiKeyArgs"]


# Rate limits (GCRA). KEYS: the limits a request counts against (a principal's and its
# tenant's share one slot; or a client address's failed authentications). ARGV: RateArgs. A
# key holds the theoretical arrival time (TAT) of the next request; a request passes unless
# TAT + interval - window is still ahead. As many of the requests pass as every limit lets
# through (the first ones), and each limit is charged for those; none passes: none is
# charged. Returns {allowed 1|0 (all passed), retry after ms (for the next one, when not all
# passed), then per key: remaining, ms until replenished; then how many passed}.


@dataclass(slots=True)
class RateArgs(ScriptArgs):
    """The rate script's ARGV, in order."""

    count: int  # how many requests to charge (a JSON-RPC batch charges its calls at once)
    # Per key, in the order of KEYS: its emission interval and its tolerance (the window), in
    # ms ('%.3f').
    limits: Sequence[str]


RATE = (
    RateArgs.lua()
    + """
-- Key i's emission interval and window.
local function limit(i)
  return tonumber(ARGV[limits_from + 2 * i - 2]), tonumber(ARGV[limits_from + 2 * i - 1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
count = tonumber(count)
local passed, tats = count, {}
for i = 1, #KEYS do
  local interval, window = limit(i)
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
  local interval, window = limit(i)
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
)


# KEYS: 1 a managed API key's record. ARGV: UseApiKeyArgs. Marks the key used now and returns
# its record (HGETALL), or nothing when there is no such key (none is created).


@dataclass(slots=True)
class UseApiKeyArgs(ScriptArgs):
    """The use-api-key script's ARGV, in order."""

    now: int  # ms


USE_API_KEY = (
    UseApiKeyArgs.lua()
    + """
local RECORD = KEYS[1]
if redis.call('EXISTS', RECORD) == 0 then return {} end
redis.call('HSET', RECORD, 'last_used', now)
return redis.call('HGETALL', RECORD)
"""
)
