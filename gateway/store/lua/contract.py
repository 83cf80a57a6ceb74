"""What every script shares with Python: the names, the arguments and the key locals.

Names shared with Python (fields, marks, channels, states) are generated into each script's
text from their definitions (``LUA_NAMES``, as ``CONSTANTS``), so no script spells one
itself. A script's ARGV is a ``ScriptArgs`` dataclass whose fields, in ARGV order, become the
script's Lua locals (``ScriptArgs.lua``) and which encodes itself (``ScriptArgs.argv``): the
order is written once. A context script's KEYS are ``ContextKeys.all()``, bound to locals
named after its fields (``CONTEXT_KEYS``). Replies are read with ``text``, ``pushed`` and
``as_bytes`` here.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields as dataclass_fields
from typing import Any, get_origin, get_type_hints

from gateway import a2a
from gateway.a2a import INTERRUPTED, TERMINAL
from gateway.store import fields as f
from gateway.store.assembly import text_of as text
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
    "CONSTANTS",
    "CONTEXT_KEYS",
    "LUA_NAMES",
    "ScriptArgs",
    "as_bytes",
    "context_keys_from",
    "lua_value",
    "pushed",
    "text",
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


def lua_value(value: str | int) -> str:
    """A Lua literal of ``value`` (a string must need no escape)."""
    if isinstance(value, int):
        return str(value)
    if any(c in value for c in "'\\\n"):
        raise ValueError(f"not a plain Lua string: {value!r}")
    return f"'{value}'"


def _lua_set(name: str, members: frozenset[str]) -> str:
    return (
        f"local {name} = {{" + ", ".join(f"[{lua_value(m)}] = true" for m in sorted(members)) + "}"
    )


# The generated locals: every name of LUA_NAMES, and the sets of terminal and interrupted
# task states.
CONSTANTS = (
    "\n".join(
        [
            *(f"local {name} = {lua_value(value)}" for name, value in LUA_NAMES.items()),
            _lua_set("TERMINAL", TERMINAL),
            _lua_set("INTERRUPTED", INTERRUPTED),
        ]
    )
    + "\n"
)


class ScriptArgs:
    """A script's ARGV: subclasses are dataclasses whose fields are its arguments in ARGV
    order. A last field typed ``Sequence`` is the rest of ARGV: it is spread, and the
    script's local ``<field>_from`` is its first index. They are slotted and not frozen:
    one is built for every send and every write of a run, and a frozen dataclass's
    ``__init__`` costs about twice as much."""

    __slots__ = ()

    @classmethod
    def lua(cls) -> str:
        """The script's ARGV as Lua locals named after the fields."""
        names = _names(cls)
        rest = get_origin(get_type_hints(cls)[names[-1]]) is Sequence
        fixed = names[:-1] if rest else names
        source = ""
        if fixed:
            argv_of = ", ".join(f"ARGV[{i}]" for i in range(1, len(fixed) + 1))
            source = f"local {', '.join(fixed)} = {argv_of}\n"
        if rest:
            source += f"local {names[-1]}_from = {len(fixed) + 1}\n"
        return source

    def argv(self) -> list[Any]:
        """The script's ARGV (a last sequence field is spread)."""
        *fixed, last = _values(type(self))(self)
        return [*fixed, *last] if isinstance(last, list | tuple) else [*fixed, last]


def _names(cls: type[ScriptArgs]) -> tuple[str, ...]:
    return tuple(field.name for field in dataclass_fields(cls))  # type: ignore[arg-type]


# Per ScriptArgs class: its fields' values in order, read at C speed (a send encodes nineteen).
_READERS: dict[type[ScriptArgs], Callable[[ScriptArgs], tuple[Any, ...]]] = {}


def _values(cls: type[ScriptArgs]) -> Callable[[ScriptArgs], tuple[Any, ...]]:
    reader = _READERS.get(cls)
    if reader is None:
        names = _names(cls)
        if len(names) == 1:
            reader = _READERS[cls] = lambda args: (getattr(args, names[0]),)
        else:
            reader = _READERS[cls] = operator.attrgetter(*names)
    return reader


# A context script's keys (``ContextKeys.all()``) as locals named after its fields: CONTEXTS,
# TASK_INDEX, ORIGINS, META, ITEMS, TASKS, MSGS, MIDS, VECTORS, VECTOR_SEQS, VECTOR_BITS,
# SEEN, LEDGER, RUNNING; then the streams: jobs, embeddings, long-term memory outbox and
# push deliveries (absent on a cluster).
_CONTEXT_NAMES = [k.name.upper() for k in dataclass_fields(ContextKeys)]


def context_keys_from(base: str) -> str:
    """Lua: the context's key locals assigned from KEYS, the first at index ``base`` + 1."""
    keys = ", ".join(f"KEYS[{base}{i}]" for i in range(1, len(_CONTEXT_NAMES) + 1))
    return f"{', '.join(_CONTEXT_NAMES)} = {keys}\n"


CONTEXT_KEYS = "local " + context_keys_from("")


def pushed(reply: list[Any], at: int) -> bool:
    """Whether the script's reply says 'push' at ``at``: on a cluster, deliveries it queued
    wait in the context's slot for the store to move them to the push stream."""
    return len(reply) > at and text(reply[at]) == "push"


def as_bytes(reply: list[Any]) -> list[bytes]:
    """A reply's values as bytes (Redis gives a number of digits as an integer)."""
    return [r if isinstance(r, bytes) else str(r).encode() for r in reply]
