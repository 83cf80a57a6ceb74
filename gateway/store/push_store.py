"""Push configs in Redis: fields of their task in the context's tasks hash (``<tid>:pn``
lists the ids, ``<tid>:pn:<id>`` holds each config), so they expire and are scrubbed with
their context and cost no key of their own. A config's URL, token and credentials are sealed
here on their way in and opened on their way out (``push_records.py``). Deliveries are
queued by the scripts that change a task (``notify`` in ``lua/prelude.py``), never here."""

from __future__ import annotations

from typing import Any

from gateway.principal import Principal
from gateway.store.assembly import text_of as _text
from gateway.store.fields import PUSH_IDS, STATE, task_field
from gateway.store.keys import UserKeys, keys_of
from gateway.store.lua.push import PushConfigArgs, PushConfigOutcome, push_config_reply
from gateway.store.push_records import config_field, open_config, seal_config
from gateway.store.redis_store import Store
from gateway.store.translate import translated as _translated

__all__ = ["PushStore"]


class PushStore:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._client: Any = store.client

    @_translated
    async def write(
        self,
        principal: Principal,
        context_id: str,
        task_id: str,
        config_id: str,
        config_json: bytes,
        most: int,
    ) -> PushConfigOutcome:
        """Set (``config_json``) or delete (``b""``) one config: 'ok', 'notask' or 'full'."""
        keys = keys_of(principal)
        if config_json:
            await self._store.note_push_context(keys, context_id)
        sealed = seal_config(self._store.sealer, keys.prefix, context_id, task_id, config_json)
        reply = await self._store.scripts.push_config(
            keys=self._store._keys(keys, context_id),
            args=PushConfigArgs(task_id, config_id, sealed, self._store.ttl_ms, most).argv(),
        )
        return push_config_reply(reply)

    @_translated
    async def read(
        self, principal: Principal, context_id: str, task_id: str
    ) -> dict[str, bytes] | None:
        """The task's configs by id (clear JSON), or None when there is no such task."""
        keys = keys_of(principal)
        tasks = keys.context(context_id).tasks
        state, ids = await self._client.hmget(
            tasks, [task_field(task_id, STATE), task_field(task_id, PUSH_IDS)]
        )
        if state is None:
            return None
        names = [i for i in _text(ids).split(",") if i] if ids else []
        if not names:
            return {}
        raw = await self._client.hmget(tasks, [config_field(task_id, i) for i in names])
        return {
            i: self._open(keys, context_id, task_id, r)
            for i, r in zip(names, raw, strict=True)
            if r is not None
        }

    @_translated
    async def one(self, principal: Principal, context_id: str, task_id: str, config_id: str) -> Any:
        """One config's clear JSON (None when the task, its context or the config is gone)."""
        keys = keys_of(principal)
        tasks = keys.context(context_id).tasks
        raw = await self._client.hget(tasks, config_field(task_id, config_id))
        return None if raw is None else self._open(keys, context_id, task_id, raw)

    def _open(self, keys: UserKeys, context_id: str, task_id: str, raw: bytes) -> bytes:
        return open_config(self._store.sealer, keys.prefix, context_id, task_id, raw)
