"""Long-term memory state in Redis: recalled ids (dedupe across turns), the ledger of
memories Cortadel added from a context, and the turns the outbox delivers.

Both sets live with their context (``seen``/``ledger``, see ``keys.py``): they expire
with it, the scrub deletes them, and their scripts write nothing once it is gone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.clock import now_ms
from gateway.principal import Principal
from gateway.store.assembly import message_seqs
from gateway.store.assembly import text_of as _text
from gateway.store.fields import MESSAGES, task_field
from gateway.store.keys import UserKeys, keys_of
from gateway.store.lua.longterm import LedgerArgs, RememberArgs, remember_reply
from gateway.store.redis_store import Store
from gateway.store.translate import translated as _translated

__all__ = ["LongTermStore", "TurnRef"]

_MARK_MS = 600_000  # how long a stored turn's mark lasts


@dataclass(frozen=True)
class TurnRef:
    """One turn to store: the user message at ``seq`` of a task, and the replies after it."""

    principal: Principal
    context_id: str
    task_id: str
    seq: int

    @property
    def keys(self) -> UserKeys:
        return keys_of(self.principal)


class LongTermStore:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._client = store.client

    def subject(self, principal: Principal, context_id: str, token: str) -> str | None:
        """The subject a job's sealed ``token`` names (None: none)."""
        keys = keys_of(principal)
        return self._store.open_subject_token(keys, context_id, token) if token else None

    @_translated
    async def remember(
        self, principal: Principal, context_id: str, ids: Sequence[str], keep: int
    ) -> set[str]:
        """Which of ``ids`` were not recalled into the context before; all are remembered."""
        keys = keys_of(principal)
        if not ids:
            return set()
        ck = keys.context(context_id)
        args = RememberArgs(now_ms(), keep, list(ids)).argv()
        return remember_reply(
            await self._store.scripts.remember(keys=[ck.meta, ck.seen], args=args)
        )

    @_translated
    async def add_to_ledger(
        self, principal: Principal, context_id: str, ids: Sequence[str]
    ) -> bool:
        """Record memories added from the context; False when the context is gone."""
        keys = keys_of(principal)
        if not ids:
            return True
        ck = keys.context(context_id)
        return bool(
            await self._store.scripts.ledger(
                keys=[ck.meta, ck.ledger], args=LedgerArgs(list(ids)).argv()
            )
        )

    @_translated
    async def ledger(self, principal: Principal, context_id: str) -> set[str]:
        keys = keys_of(principal)
        return {_text(i) for i in await self._client.smembers(keys.context(context_id).ledger)}

    @_translated
    async def mark_stored(self, refs: Sequence[TurnRef]) -> None:
        """Note that Cortadel has stored these turns (for sends that wait for it)."""
        async with self._client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.set(ref.keys.stored_turn(ref.context_id, ref.task_id, ref.seq), 1, px=_MARK_MS)
            await pipe.execute()

    @_translated
    async def stored(self, ref: TurnRef) -> bool:
        return bool(
            await self._client.exists(ref.keys.stored_turn(ref.context_id, ref.task_id, ref.seq))
        )

    @_translated
    async def turns(self, refs: Sequence[TurnRef]) -> list[list[dict[str, Any]]]:
        """Each turn's messages, oldest first: its user message and the agent messages that
        follow it in the task up to the next user message ([] when the context is gone)."""
        async with self._client.pipeline(transaction=False) as pipe:
            for ref in refs:
                pipe.hget(ref.keys.context(ref.context_id).tasks, task_field(ref.task_id, MESSAGES))
            all_seqs = await pipe.execute()
        wanted: list[list[bytes]] = []
        for ref, raw in zip(refs, all_seqs, strict=True):
            seqs = [s for s in message_seqs(raw) if int(s) >= ref.seq]
            wanted.append(seqs)
        async with self._client.pipeline(transaction=False) as pipe:
            for ref, seqs in zip(refs, wanted, strict=True):
                pipe.hmget(ref.keys.context(ref.context_id).msgs, seqs or [b"0"])
            raw_msgs = await pipe.execute()
        out: list[list[dict[str, Any]]] = []
        for ref, seqs, msgs in zip(refs, wanted, raw_msgs, strict=True):
            turn: list[dict[str, Any]] = []
            for seq, raw in zip(seqs, msgs, strict=False):
                if raw is None:
                    continue
                message = orjson.loads(self._store.open_message(ref.keys, ref.context_id, raw))
                if int(seq) > ref.seq and message.get("role") == "user":
                    break
                turn.append(message)
            out.append(turn)
        return out
