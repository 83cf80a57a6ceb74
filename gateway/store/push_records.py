"""A push config as Redis holds it (pure; no I/O): the facts the scripts route deliveries by
stay clear, the rest is sealed like any content (``sealing.py``).

Clear, for the scripts (``notify`` decodes the record): ``id``, ``t`` and ``u`` (the
principal), ``a`` (wants artifact updates) and ``v`` (the version the webhook gets). Sealed,
in ``x`` (the text form of a sealed value): the URL, the token and the authentication
(``{"url", "token", "auth"}``). The associated data binds them to the user, the context, the
field (``<tid>:pn:<id>``) and the routing facts beside them. With encryption off (or for a
config written before sealing) those fields are in the record itself, clear, and are read as
they are.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.store.fields import (
    CONFIG_ARTIFACTS,
    CONFIG_TENANT,
    CONFIG_USER,
    PUSH_CONFIG,
    task_field,
)
from gateway.store.sealing import Sealer, context_of, key_id_of

__all__ = ["config_field", "is_current", "open_config", "seal_config"]

# What the scripts read; everything else in a config is sealed.
_ROUTING = ("id", CONFIG_TENANT, CONFIG_USER, CONFIG_ARTIFACTS, "v")
_SORTED = orjson.OPT_SORT_KEYS


def config_field(task_id: str, config_id: str) -> str:
    """The tasks-hash field that holds one config of a task."""
    return task_field(task_id, f"{PUSH_CONFIG}{config_id}")


def _aad(prefix: str, context_id: str, task_id: str, routing: dict[str, Any]) -> bytes:
    """Binds the sealed part to its field and to the clear routing facts beside it."""
    field = config_field(task_id, str(routing["id"]))
    return context_of(prefix, context_id, field) + orjson.dumps(routing, option=_SORTED)


def seal_config(sealer: Sealer, prefix: str, context_id: str, task_id: str, record: bytes) -> bytes:
    """A config record (clear JSON, with its ``id``) as it is stored."""
    if not record or not sealer.seal_writes:
        return record
    clear: dict[str, Any] = orjson.loads(record)
    routing = {k: clear.pop(k) for k in _ROUTING if k in clear}
    if not clear:
        return orjson.dumps(routing)
    aad = _aad(prefix, context_id, task_id, routing)
    secret = sealer.seal_token(orjson.dumps(clear), aad).decode()
    return orjson.dumps({**routing, "x": secret})


def open_config(sealer: Sealer, prefix: str, context_id: str, task_id: str, stored: bytes) -> bytes:
    """The clear record of a stored config (``StoredDataUnreadableError`` when its sealed
    part does not open here)."""
    record: dict[str, Any] = orjson.loads(stored)
    secret = record.pop("x", None)
    if secret is None:
        return stored
    aad = _aad(prefix, context_id, task_id, record)
    return orjson.dumps({**record, **orjson.loads(sealer.open_token(secret.encode(), aad))})


def is_current(stored: bytes, target: str) -> bool:
    """Whether a stored config is as a write now would store it: sealed with ``target``
    (the current key), or, ``target`` empty (encryption off), clear."""
    secret = orjson.loads(stored).get("x")
    if secret is None:
        return not target
    return key_id_of(secret.encode()) == (target or None)
