"""The scripts of a context's vectors: embedded user messages added (``ADD_VECTORS``), reset
for a new model (``RESET_VECTORS``), and rewritten in another layout by key rotation or
compaction (``REWRITE_VECTORS``). Their replies are counts, read where they are used."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gateway.store.lua.contract import CONSTANTS, CONTEXT_KEYS, ScriptArgs
from gateway.store.lua.prelude import BIND_CONTEXT, PRELUDE, SLIDING_TTL

__all__ = [
    "ADD_CONTEXT_VECTORS",
    "ADD_VECTORS",
    "RESET_VECTORS",
    "REWRITE_VECTORS",
    "AddVectorsArgs",
    "ResetVectorsArgs",
    "RewriteVectorsArgs",
    "VectorRows",
]

# Lua: the seq bits of a context's first vectors, gathered and written as one value with
# them (a SET with its TTL instead of a SETBIT and a PEXPIRE).
SEQ_BITMAP = """
-- The seq bits of a context's first vectors, gathered here and written as one value with
-- them (a SET with its TTL instead of a SETBIT and a PEXPIRE): `bits` maps a byte's offset
-- to its value; bit `seq` is that of SETBIT (the high bit of a byte first).
local function set_bit(bits, seq)
  local at, bit = math.floor(seq / 8), 2 ^ (7 - seq % 8)
  local byte = bits[at] or 0
  if byte % (2 * bit) >= bit then return false end
  bits[at] = byte + bit
  return true
end
local function bitmap(bits)
  local offsets = {}
  for at in pairs(bits) do offsets[#offsets + 1] = at end
  table.sort(offsets)
  local parts, next_at = {}, 0
  for _, at in ipairs(offsets) do
    parts[#parts + 1] = string.rep('\\0', at - next_at) .. string.char(bits[at])
    next_at = at + 1
  end
  return table.concat(parts)
end
"""

# Lua: `add`, one context's part of the add-vectors script (the context bound, the locals
# `ttl`, `new_model` and `new_dims` set; `set_bit` and `bitmap` of SEQ_BITMAP). The meta
# fields it sets wait in META_SETS for the caller's `flush_meta`.
ADD_CONTEXT_VECTORS = """
local function add(skipped, frame, rows_at, rows_end)
  local seq, model, dims, form, queued, reembedding, embedded, bytes = unpack(redis.call(
    'HMGET', META, M_SEQ, M_VECTOR_MODEL, M_VECTOR_DIMS, M_VECTOR_FORM, M_EMBED_QUEUED,
    M_REEMBEDDING, M_EMBEDDED, M_BYTES))
  if not seq then return 0 end  -- gone: every context that has a message has a seq
  META_SEQ, META_BYTES = seq, bytes
  if (model and model ~= new_model) or (dims and (not model or dims ~= new_dims)) then
    return -1
  end
  local sealed = frame ~= ''
  -- Vectors already stored: their seqs and bits were written beside them, with the TTL.
  -- None stored: no bit is set, and the three keys this creates have no TTL yet. A context
  -- names its vectors' dimensions from its first vectors on (a reset drops both): one that
  -- names none has none, and is not looked at.
  local stored = dims and redis.call('STRLEN', VECTORS) > 0
  if stored and (form == 's') ~= sealed then return -3 end
  if sealed then
    for i = rows_at, stored and rows_end or 0, 3 do  -- none stored: no bit to find
      if redis.call('GETBIT', VECTOR_BITS, tonumber(ARGV[i + 1])) == 1 then return -2 end
    end
    if form ~= 's' then set_meta(M_VECTOR_FORM, 's') end
  elseif form then
    redis.call('HDEL', META, M_VECTOR_FORM)
  end
  -- From here on nothing is refused: the meta fields wait for the caller's `flush_meta`.
  if not dims then set_meta(M_VECTOR_MODEL, new_model); set_meta(M_VECTOR_DIMS, new_dims) end
  local seqs, rows, bits = {}, {}, {}
  for i = rows_at, rows_end, 3 do
    local seq = tonumber(ARGV[i + 1])
    local new
    if stored then new = redis.call('SETBIT', VECTOR_BITS, seq, 1) == 0
    else new = set_bit(bits, seq) end
    if new then
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
  if not stored and added > 0 then write(VECTOR_BITS, {bitmap(bits)}) end
  local done = tonumber(embedded or '0') + added + tonumber(skipped)
  set_meta(M_EMBEDDED, done)
  if reembedding and done >= tonumber(queued or '0') then
    redis.call('HDEL', META, M_REEMBEDDING)
  end
  touch(tonumber(ttl))
  return added
end
"""


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


@dataclass(slots=True)
class AddVectorsArgs(ScriptArgs):
    """The add-vectors script's ARGV, in order."""

    ttl: int  # ms
    new_model: str  # the vectors' model
    new_dims: int  # their dimensions
    contexts: Sequence[bytes | int | str]  # each context's VectorRows, spread


@dataclass(slots=True)
class VectorRows(ScriptArgs):
    """One context's part of the add-vectors script's ARGV."""

    skipped: int
    frame: bytes  # a sealed frame, '-' (sealed, no vector) or '' (clear)
    row_count: int  # how many rows follow
    # Per vector: seq (uint32 LE bytes), seq (number), float32 bytes ('' with a frame).
    rows: Sequence[bytes | int]


ADD_VECTORS = (
    CONSTANTS
    + CONTEXT_KEYS
    + SLIDING_TTL
    + BIND_CONTEXT
    + AddVectorsArgs.lua()
    + SEQ_BITMAP
    + ADD_CONTEXT_VECTORS
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


@dataclass(slots=True)
class ResetVectorsArgs(ScriptArgs):
    """The reset-vectors script's ARGV, in order."""

    ttl: int  # ms
    new_model: str  # the model the context's vectors are re-embedded with
    requeued: int  # how many messages the caller queues again
    listed: int  # the context's 'embq' when the caller listed them


RESET_VECTORS = (
    PRELUDE
    + ResetVectorsArgs.lua()
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


# KEYS: 1 a context's meta 2 its vectors. ARGV: RewriteVectorsArgs. Replaces the stored
# vectors unless vectors were added or reset meanwhile, keeping the expiry, and starts a new
# generation (searching processes read the new layout whole). Returns the new generation,
# or 0 when it changed nothing.


@dataclass(slots=True)
class RewriteVectorsArgs(ScriptArgs):
    """The rewrite-vectors script's ARGV, in order."""

    length: int  # the vectors' length when read
    generation: int  # their generation ('vgen') when read
    rows: bytes  # the same rows in another layout: one sealed frame, or clear rows
    form: str  # 's' (sealed) or '' (clear)


REWRITE_VECTORS = (
    CONSTANTS
    + RewriteVectorsArgs.lua()
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
