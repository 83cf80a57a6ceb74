"""Context memory in Redis: the vectors of a context's user messages, and the messages.

Vectors live with their context (``vec``/``vix``/``vbits``, see ``keys.py``), expire with it
and go with a scrub; they are written by the ``_ADD_VECTORS`` script.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.store.keys import CONTEXT_KEY_COUNT, EMBEDS, UserKeys
from gateway.store.redis_store import Store
from gateway.store.translate import translated as _translated

__all__ = ["MemoryStore", "StoredVectors", "VectorBatch"]


@dataclass(frozen=True)
class VectorBatch:
    """Vectors (message seq, float32 bytes) for one context, and how many of its queued
    messages held nothing to embed."""

    keys: UserKeys
    context_id: str
    model: str
    dimensions: int
    vectors: Sequence[tuple[int, bytes]]
    skipped: int


@dataclass(frozen=True)
class StoredVectors:
    """What a search reads of a live context: vector rows (float32) and the message seq of
    each row from the row it asked for on, their dimensions, model ('' if written before
    vectors named theirs) and generation (a re-embedding starts a new one), whether they are
    being re-embedded, and the context's highest message seq."""

    vectors: bytes
    seqs: bytes
    dimensions: int
    model: str
    generation: int
    reembedding: bool
    last_seq: int
    first_row: int

    @property
    def rows(self) -> int:
        """Complete rows read (a write landing between the two reads adds to one only)."""
        width = 4 * self.dimensions
        return min(len(self.vectors) // width, len(self.seqs) // 4) if width else 0


class MemoryStore:
    def __init__(self, store: Store) -> None:
        self._store = store

    @_translated
    async def messages_by_seq(
        self, wanted: Sequence[tuple[UserKeys, str, int]]
    ) -> list[dict[str, Any] | None]:
        """The stored messages at (user, context, seq), in order (None where gone)."""
        async with self._store.client.pipeline(transaction=False) as pipe:
            for keys, context_id, seq in wanted:
                pipe.hget(keys.context(context_id).msgs, str(seq))
            raw = await pipe.execute()
        return [
            orjson.loads(self._store.open_message(keys, context_id, m)) if m is not None else None
            for (keys, context_id, _), m in zip(wanted, raw, strict=True)
        ]

    @_translated
    async def add_vectors(self, batches: Sequence[VectorBatch]) -> list[int]:
        """Append vectors to live contexts, one script per context, in one round trip;
        see ``_ADD_VECTORS``. Returns what each added (-1: the context's vectors are of
        another model)."""
        calls = []
        for b in batches:
            args: list[Any] = [self._store.ttl_ms, b.model, b.dimensions, b.skipped]
            for seq, blob in b.vectors:
                args += [seq.to_bytes(4, "little"), seq, blob]
            calls.append((b.keys.context(b.context_id).all()[:CONTEXT_KEY_COUNT], args))
        if self._store.cluster:  # a cluster pipeline refuses scripts: send them side by side
            replies = await asyncio.gather(
                *(self._store.scripts.add_vectors(keys=k, args=a) for k, a in calls)
            )
        else:
            async with self._store.client.pipeline(transaction=False) as pipe:
                for k, a in calls:
                    await self._store.scripts.add_vectors(keys=k, args=a, client=pipe)
                replies = await pipe.execute()
        return [int(r) for r in replies]

    @_translated
    async def messages_after(
        self, keys: UserKeys, context_id: str, after: int, last: int
    ) -> list[tuple[int, dict[str, Any]]]:
        """The stored messages of seqs ``after + 1`` to ``last``, in order, with their seqs."""
        seqs = range(after + 1, last + 1)
        msgs = keys.context(context_id).msgs
        async with self._store.client.pipeline(transaction=False) as pipe:
            for start in range(0, len(seqs), 1000):
                pipe.hmget(msgs, [str(s) for s in seqs[start : start + 1000]])
            chunks = await pipe.execute()
        raw = [m for chunk in chunks for m in chunk]
        opened = self._store.open_message
        return [
            (s, orjson.loads(opened(keys, context_id, m)))
            for s, m in zip(seqs, raw, strict=True)
            if m is not None
        ]

    @_translated
    async def vectors(
        self, keys: UserKeys, context_id: str, first_row: int = 0, width: int = 0
    ) -> StoredVectors | None:
        """The vectors of a live context from row ``first_row`` on (rows of ``width``
        dimensions: a caller holding the earlier rows reads only the new ones); None when the
        context is gone."""
        ck = keys.context(context_id)
        async with self._store.client.pipeline(transaction=False) as pipe:
            pipe.hmget(ck.meta, ["created", "vdim", "vmodel", "vgen", "vre", "seq"])
            pipe.getrange(ck.vector_seqs, 4 * first_row, -1)
            pipe.getrange(ck.vectors, 4 * width * first_row, -1)
            (created, dims, model, gen, again, last), seqs, vectors = await pipe.execute()
        if created is None:
            return None
        return StoredVectors(
            vectors or b"",
            seqs or b"",
            int(dims or 0),
            model.decode() if model else "",
            int(gen or 0),
            again is not None,
            int(last or 0),
            first_row,
        )

    @_translated
    async def embedding_state(self, keys: UserKeys, context_id: str) -> tuple[int, int] | None:
        """(highest message seq, messages ever queued for embedding); None when gone."""
        meta = keys.context(context_id).meta
        created, last, queued = await self._store.client.hmget(meta, ["created", "seq", "embq"])
        return None if created is None else (int(last or 0), int(queued or 0))

    @_translated
    async def reset_vectors(
        self,
        keys: UserKeys,
        context_id: str,
        model: str,
        seqs: Sequence[int],
        queued: int,
        job_json: bytes,
    ) -> bool:
        """Start re-embedding a context by ``model`` (see ``_RESET_VECTORS``) and queue its
        messages ``seqs`` again; ``queued`` is its 'embq' when they were listed. False when
        its vectors are already of that model, or it is gone."""
        ck = keys.context(context_id)
        started = await self._store.scripts.reset_vectors(
            keys=ck.all()[:CONTEXT_KEY_COUNT],
            args=[self._store.ttl_ms, model, len(seqs), queued],
        )
        if int(started) != 1:
            return False
        async with self._store.client.pipeline(transaction=False) as pipe:
            for seq in seqs:
                pipe.xadd(EMBEDS, {b"job": job_json, b"seq": seq})
            await pipe.execute()
        return True
