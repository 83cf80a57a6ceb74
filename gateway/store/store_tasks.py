"""A user's tasks read (``TaskReads``): which context holds a task, its state and status,
whether a run settled, a whole task with its history, and a run's history messages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson

from gateway.a2a import INTERRUPTED, TERMINAL
from gateway.models import RawJson, Task
from gateway.principal import Principal
from gateway.store import fields as f
from gateway.store.assembly import message_seqs
from gateway.store.assembly import text_of as _text
from gateway.store.fields import TASK_FIELDS as _TASK_FIELDS
from gateway.store.fields import task_field
from gateway.store.keys import keys_of
from gateway.store.store_base import StoreBase
from gateway.store.translate import translated as _translated

__all__ = ["TaskReads"]

log = logging.getLogger("gateway.store")


class TaskReads(StoreBase):
    """The store's reads of tasks."""

    @_translated
    async def task_context(self, principal: Principal, task_id: str) -> str | None:
        keys = keys_of(principal)
        raw = await self._read("HGET", keys.task_index, task_id)
        return _text(raw) if raw is not None else None

    @_translated
    async def task_contexts(self, principal: Principal) -> dict[str, str]:
        """Every task id of the user with its context id (entries of expired contexts may
        linger until the next prune: their tasks read as None)."""
        keys = keys_of(principal)
        raw = await self.client.hgetall(keys.task_index)
        return {_text(k): _text(v) for k, v in raw.items()}

    @_translated
    async def task_statuses(
        self, principal: Principal, tasks: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any] | None]:
        """The status of each ``(task id, context id)``, None where the task is gone, in one
        round trip (a listing reads whole tasks only for the page it shows)."""
        keys = keys_of(principal)
        async with self.client.pipeline(transaction=False) as pipe:
            for task_id, context_id in tasks:
                pipe.hget(keys.context(context_id).tasks, task_field(task_id, f.STATUS))
            raw = await pipe.execute()
        return [
            None
            if status is None
            else orjson.loads(self._open(keys, cid, task_field(tid, f.STATUS), status))
            for (tid, cid), status in zip(tasks, raw, strict=True)
        ]

    @_translated
    async def task_state(self, principal: Principal, context_id: str, task_id: str) -> str | None:
        keys = keys_of(principal)
        raw = await self._read("HGET", keys.context(context_id).tasks, task_field(task_id, f.STATE))
        return _text(raw) if raw is not None else None

    @_translated
    async def run_settled(
        self, principal: Principal, context_id: str, task_id: str, seq: int
    ) -> bool:
        """Whether a blocking send of the message at ``seq`` may return: the task is gone or
        terminal, or the message's run has settled (the task is interrupted, or has gone on to
        a later message). ``seq`` 0: whether the task is settled, whatever ran."""
        keys = keys_of(principal)
        fields = [task_field(task_id, s) for s in (f.STATE, f.RAN, f.JOB)]
        state, ran, job = await self._read("HMGET", keys.context(context_id).tasks, *fields)
        if state is None or _text(state) in TERMINAL:
            return True
        if seq and int(ran or 0) < seq:
            return False
        return _text(state) in INTERRUPTED or (bool(seq) and job is not None)

    @_translated
    async def read_task(
        self, principal: Principal, context_id: str, task_id: str, history_length: int | None
    ) -> Task | None:
        """The task; ``history_length`` None means the whole history."""
        keys = keys_of(principal)
        ck = keys.context(context_id)
        fields = [task_field(task_id, s) for s in (*_TASK_FIELDS, f.OPEN_ARTIFACT)]
        status, arts, seqs, metadata, extra, streamed = await self._read("HMGET", ck.tasks, *fields)
        if status is None:
            return None
        history: list[bytes] | None = None
        wanted = message_seqs(seqs, history_length)
        if wanted:
            # Messages may be large: their read keeps a pooled connection of its own.
            found = await self.client.hmget(ck.msgs, wanted)
            history = self._history(keys, context_id, wanted, found)
        elif history_length is None or history_length > 0:
            history = []
        stored = (status, arts, metadata, extra)
        return self._task(keys, context_id, task_id, stored, history, streamed)

    @_translated
    async def context_messages(
        self, principal: Principal, context_id: str, seqs: Sequence[int]
    ) -> list[RawJson]:
        """The messages at ``seqs`` (sequence numbers) of a context, in that order, as
        stored (A2A 0.3 JSON)."""
        keys = keys_of(principal)
        if not seqs:
            return []
        raw = await self.client.hmget(keys.context(context_id).msgs, list(seqs))
        found = self._history(keys, context_id, seqs, raw, stand_ins=False)
        if len(found) < len([m for m in raw if m is not None]):
            log.warning("messages left out of a run's history: they do not decrypt here")
        return [RawJson(m) for m in found]
