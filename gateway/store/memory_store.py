"""Context memory in Redis: the vectors of a context's user messages, and the messages.

Vectors live with their context (``vec``/``vix``/``vbits``, see ``keys.py``), expire with it
and go with a scrub; they are written by the ``_ADD_VECTORS`` script.

With encryption on, ``vec`` is a string of frames: each indexer batch's rows for a context
sealed as one value (bound to the user, the context and ``vec``) behind a 4-byte length, so
a search reads and opens only the frames written since it last read. A search that reads a
context whole and finds many frames merges them into one (``_REWRITE_VECTORS``, a new
generation). Contexts indexed in clear (before encryption was on) stay in clear until a
re-embedding or ``gateway encryption rotate-data``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.errors import StoredDataUnreadableError
from gateway.principal import Principal
from gateway.store import fields as f
from gateway.store.keys import CONTEXT_KEY_COUNT, EMBEDS, UserKeys, keys_of
from gateway.store.lua.vectors import AddVectorsArgs, ResetVectorsArgs, RewriteVectorsArgs
from gateway.store.redis_store import Store
from gateway.store.sealing import context_of, sealed_length
from gateway.store.translate import translated as _translated
from gateway.store.vector_rows import VECTORS_FIELD, frame, frames_of, vector_rows

__all__ = ["VECTORS_FIELD", "MemoryStore", "StoredVectors", "VectorBatch", "frame", "frames_of"]

# A search that reads a context whole and opens more frames than this merges them into one.
_COMPACT_AFTER = 16
# What a read of the vectors takes from the context's meta hash, in the order it unpacks.
_VECTOR_META = [
    f.META_CREATED,
    f.META_VECTOR_DIMS,
    f.META_VECTOR_MODEL,
    f.META_VECTOR_GENERATION,
    f.META_REEMBEDDING,
    f.META_SEQ,
    f.META_VECTOR_FORM,
]


@dataclass(frozen=True)
class VectorBatch:
    """Vectors (message seq, float32 bytes) for one context, and how many of its queued
    messages held nothing to embed."""

    principal: Principal
    context_id: str
    model: str
    dimensions: int
    vectors: Sequence[tuple[int, bytes]]
    skipped: int

    @property
    def keys(self) -> UserKeys:
        return keys_of(self.principal)


@dataclass(frozen=True)
class StoredVectors:
    """What a search reads of a live context: vector rows (float32) and the message seq of
    each row from the row it asked for on, their dimensions, model ('' if written before
    vectors named theirs) and generation (a re-embedding, or a new layout of the same rows,
    starts a new one), whether they are being re-embedded, the context's highest message seq,
    and where in the stored vectors the rows read end (the next read starts there)."""

    vectors: bytes
    seqs: bytes
    dimensions: int
    model: str
    generation: int
    reembedding: bool
    last_seq: int
    first_row: int
    end: int = 0

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
        self, wanted: Sequence[tuple[Principal, str, int]]
    ) -> list[dict[str, Any] | None]:
        """The stored messages at (user, context, seq), in order (None where gone)."""
        keyed = [(keys_of(principal), context_id, seq) for principal, context_id, seq in wanted]
        fields = [(keys.context(context_id).msgs, str(seq)) for keys, context_id, seq in keyed]
        hot = self._store.hot
        if hot is not None:  # written beside the sends of the moment
            raw = await hot.execute_many([("HGET", key, seq) for key, seq in fields])
        else:
            async with self._store.client.pipeline(transaction=False) as pipe:
                for key, seq in fields:
                    pipe.hget(key, seq)
                raw = await pipe.execute()
        return [
            self._readable(keys, context_id, m)
            for (keys, context_id, _), m in zip(keyed, raw, strict=True)
        ]

    def handed_text(self, principal: Principal, context_id: str, seq: int) -> str | None:
        """The embeddable text of the message at (user, context, seq) as this process's send
        handed it over (``embed_texts.py``), once; None: read the message back."""
        texts = self._store.embed_texts
        return None if texts is None else texts.take(keys_of(principal).prefix, context_id, seq)

    def _readable(self, keys: UserKeys, context_id: str, raw: Any) -> dict[str, Any] | None:
        """A stored message, parsed; None when it is gone or does not open here (its key is
        not configured, or it was moved): neither indexed nor found, the others are."""
        if raw is None:
            return None
        try:
            message: dict[str, Any] = orjson.loads(self._store.open_message(keys, context_id, raw))
        except StoredDataUnreadableError:
            return None
        return message

    def _rows(self, b: VectorBatch, sealed: bool) -> list[Any]:
        """One context's part of the add-vectors script's ARGV."""
        prefix, sealer = b.keys.prefix, self._store.sealer
        return vector_rows(sealer, prefix, b.context_id, b.vectors, b.skipped, sealed)

    async def _run(self, calls: list[tuple[list[str], list[Any]]]) -> list[list[int]]:
        hot, script = self._store.hot, self._store.scripts.add_vectors
        if hot is not None:  # written beside the sends of the moment
            replies = await hot.scripts(script, calls)
        elif self._store.cluster:  # a cluster pipeline refuses scripts: send them side by side
            replies = await asyncio.gather(*(script(keys=k, args=a) for k, a in calls))
        else:
            async with self._store.client.pipeline(transaction=False) as pipe:
                for k, a in calls:
                    await script(keys=k, args=a, client=pipe)
                replies = await pipe.execute()
        return [[int(r) for r in reply] for reply in replies]

    async def _add(self, batches: Sequence[VectorBatch], sealed: bool) -> list[int]:
        """One script call per user (a user's keys share a slot) and model, in one round
        trip; what each batch added, in order."""
        by_user: dict[tuple[str, str, int], list[int]] = {}
        for n, b in enumerate(batches):
            by_user.setdefault((b.keys.prefix, b.model, b.dimensions), []).append(n)
        calls = []
        for members in by_user.values():
            keys: list[str] = []
            rows: list[Any] = []
            for n in members:
                b = batches[n]
                keys += b.keys.context(b.context_id).all()[:CONTEXT_KEY_COUNT]
                rows += self._rows(b, sealed)
            first = batches[members[0]]
            args = AddVectorsArgs(self._store.ttl_ms, first.model, first.dimensions, rows)
            calls.append((keys, args.argv()))
        results = [0] * len(batches)
        for members, replies in zip(by_user.values(), await self._run(calls), strict=True):
            for n, added in zip(members, replies, strict=True):
                results[n] = added
        return results

    @_translated
    async def add_vectors(self, batches: Sequence[VectorBatch]) -> list[int]:
        """Append vectors to live contexts, one script per user and model, in one round
        trip; see ``_ADD_VECTORS``. Returns what each added (-1: the context's
        vectors are of another model; -3: they are sealed and encryption is now off)."""
        sealed = self._store.sealer.seal_writes
        results = await self._add(batches, sealed)
        for n, result in enumerate(results):
            if result == -2:  # some seqs were embedded already (a repeated job): drop them
                b = batches[n]
                bits = b.keys.context(b.context_id).vector_bits
                async with self._store.client.pipeline(transaction=False) as pipe:
                    for seq, _ in b.vectors:
                        pipe.getbit(bits, seq)
                    present = await pipe.execute()
                fresh = [v for v, bit in zip(b.vectors, present, strict=True) if not bit]
                results[n] = (await self._add([replace(b, vectors=fresh)], True))[0]
            elif result == -3 and sealed:
                # a context indexed before encryption was on keeps its vectors in clear
                results[n] = (await self._add([batches[n]], False))[0]
        return results

    @_translated
    async def messages_after(
        self, principal: Principal, context_id: str, after: int, last: int
    ) -> list[tuple[int, dict[str, Any]]]:
        """The stored messages of seqs ``after + 1`` to ``last``, in order, with their seqs."""
        keys = keys_of(principal)
        seqs = range(after + 1, last + 1)
        msgs = keys.context(context_id).msgs
        async with self._store.client.pipeline(transaction=False) as pipe:
            for start in range(0, len(seqs), 1000):
                pipe.hmget(msgs, [str(s) for s in seqs[start : start + 1000]])
            chunks = await pipe.execute()
        raw = [m for chunk in chunks for m in chunk]
        opened = ((s, self._readable(keys, context_id, m)) for s, m in zip(seqs, raw, strict=True))
        return [(s, m) for s, m in opened if m is not None]

    @_translated
    async def vectors(
        self,
        principal: Principal,
        context_id: str,
        first_row: int = 0,
        offset: int = 0,
        generation: int = 0,
    ) -> StoredVectors | None:
        """The vectors of a live context from row ``first_row`` on, which starts at
        ``offset`` of its stored vectors in ``generation`` (a caller holding the earlier rows
        reads only the new ones); None when the context is gone. Rows of another generation
        than ``generation`` are not read past its start: the caller reads them whole."""
        keys = keys_of(principal)
        ck = keys.context(context_id)
        while True:
            async with self._store.client.pipeline(transaction=False) as pipe:
                pipe.hmget(ck.meta, _VECTOR_META)
                pipe.getrange(ck.vector_seqs, 4 * first_row, -1)
                pipe.getrange(ck.vectors, offset, -1)
                pipe.hget(ck.meta, f.META_VECTOR_GENERATION)
                meta, seqs, vectors, gen_after = await pipe.execute()
            if meta[3] == gen_after:  # no new layout between the reads
                break
        created, dims, model, gen, again, last, form = meta
        if created is None:
            return None
        stored = StoredVectors(
            vectors or b"",
            seqs or b"",
            int(dims or 0),
            model.decode() if model else "",
            int(gen or 0),
            again is not None,
            int(last or 0),
            first_row,
            offset,
        )
        if first_row and stored.generation != generation:
            return replace(stored, vectors=b"", seqs=b"")  # offsets of another layout
        if form == b"s":
            return await self._opened(keys, context_id, stored)
        return replace(stored, end=offset + 4 * stored.dimensions * stored.rows)

    async def _opened(
        self, keys: UserKeys, context_id: str, stored: StoredVectors
    ) -> StoredVectors:
        """``stored`` with its sealed frames opened: the frames whose rows all have their seq
        read (a frame appended between the two reads waits for the next search); read whole
        with many frames, they are merged into one for the next reader."""
        aad = context_of(keys.prefix, context_id, VECTORS_FIELD)
        width, count = 4 * stored.dimensions, len(stored.seqs) // 4
        opened: list[bytes] = []
        rows = used = 0
        unreadable = False
        for sealed in frames_of(stored.vectors):
            try:
                plain = self._store.sealer.open_view(sealed, aad)
            except StoredDataUnreadableError:  # its rows read as zeros: they match nothing
                plain, unreadable = bytes(sealed_length(sealed)), True
            n = len(plain) // width if width else 0
            if rows + n > count:
                break
            opened.append(plain)
            rows += n
            used += 4 + len(sealed)
        vectors = opened[0] if len(opened) == 1 else b"".join(opened)
        result = replace(
            stored, vectors=vectors, seqs=stored.seqs[: 4 * rows], end=stored.end + used
        )
        whole = used == len(stored.vectors) and not unreadable
        if stored.end == 0 and len(opened) > _COMPACT_AFTER and whole:
            merged = frame(self._store.sealer.seal(vectors, aad))
            ck = keys.context(context_id)
            generation = int(
                await self._store.scripts.rewrite_vectors(
                    keys=[ck.meta, ck.vectors],
                    args=RewriteVectorsArgs(used, stored.generation, merged, "s").argv(),
                )
            )
            if generation:  # read next in the merged layout
                result = replace(result, generation=generation, end=len(merged))
        return result

    @_translated
    async def embedding_state(
        self, principal: Principal, context_id: str
    ) -> tuple[int, int] | None:
        """(highest message seq, messages ever queued for embedding); None when gone."""
        keys = keys_of(principal)
        meta = keys.context(context_id).meta
        created, last, queued = await self._store.client.hmget(
            meta, [f.META_CREATED, f.META_SEQ, f.META_EMBED_QUEUED]
        )
        return None if created is None else (int(last or 0), int(queued or 0))

    @_translated
    async def embedding_progress(
        self, principal: Principal, context_id: str
    ) -> tuple[int, int] | None:
        """(messages ever queued for embedding, messages embedded or skipped) of the
        context's current vectors; None when it is gone."""
        keys = keys_of(principal)
        meta = keys.context(context_id).meta
        created, queued, embedded = await self._store.client.hmget(
            meta, [f.META_CREATED, f.META_EMBED_QUEUED, f.META_EMBEDDED]
        )
        return None if created is None else (int(queued or 0), int(embedded or 0))

    @_translated
    async def reset_vectors(
        self,
        principal: Principal,
        context_id: str,
        model: str,
        seqs: Sequence[int],
        queued: int,
        job_json: bytes,
    ) -> bool:
        """Start re-embedding a context by ``model`` (see ``_RESET_VECTORS``) and queue its
        messages ``seqs`` again; ``queued`` is its 'embq' when they were listed. False when
        its vectors are already of that model, or it is gone."""
        keys = keys_of(principal)
        ck = keys.context(context_id)
        started = await self._store.scripts.reset_vectors(
            keys=ck.all()[:CONTEXT_KEY_COUNT],
            args=ResetVectorsArgs(self._store.ttl_ms, model, len(seqs), queued).argv(),
        )
        if int(started) != 1:
            return False
        async with self._store.client.pipeline(transaction=False) as pipe:
            for seq in seqs:
                pipe.xadd(EMBEDS, {f.ENTRY_JOB: job_json, f.ENTRY_SEQ: seq})
            await pipe.execute()
        return True
