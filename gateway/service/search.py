"""Search within a context: by meaning (cosine over its stored vectors), by words (BM25
over its user messages' embedded text), or both fused (see ``gateway.context_memory.ranking``).

A search with ``consistency`` ``wait`` first waits, up to ``wait_seconds``, until the
messages the context had queued are embedded (``gateway.context_memory.progress``): a client
that sends and then searches finds its message. ``eventual`` (the default) searches at once.

A context whose vectors are of another model than the embedder's is searched by words, and
queued for re-embedding (``gateway.context_memory.reembed``); so is one being re-embedded.

Each process holds what it read of the contexts it searched: their vector rows and their
lexical index, both append-only, so a later search reads only the rows and messages written
since (a re-embedding starts a new generation, which is read whole). A bounded amount is
held, least recently searched first out.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from gateway import tracing
from gateway.agents.base import ContextSearch
from gateway.canonical import hit_json
from gateway.context_memory.embedders import Embedder, EmbedderError
from gateway.context_memory.lexical import LexicalIndex, counted
from gateway.context_memory.progress import EmbeddingProgress, wait_embedded
from gateway.context_memory.ranking import rank
from gateway.context_memory.reembed import job_json, reembed
from gateway.context_memory.text import embeddable_text
from gateway.errors import ContextNotFoundError, UnavailableError, UnsupportedOperationError
from gateway.models import SearchHit
from gateway.principal import Principal
from gateway.search_mode import Consistency, Mode
from gateway.store.memory_store import MemoryStore, StoredVectors

__all__ = ["Found", "SearchService"]

# What one process holds: at most this many contexts and about this many bytes.
HELD_CONTEXTS = 256
HELD_BYTES = 64 * 1024 * 1024
_BYTES_PER_INDEXED_MESSAGE = 200  # a rough weight of a message in the lexical index
_COUNT_IN_THREAD = 500  # messages read at once from which their terms are counted in a thread


@dataclass(frozen=True)
class Found:
    """Hits, best first, and the ranking applied."""

    hits: list[SearchHit]
    mode: Mode


@dataclass
class _Held:
    """What this process holds of one context."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    index: LexicalIndex = field(default_factory=LexicalIndex)
    last_seq: int = 0  # messages up to this seq are in the index
    generation: int = 0
    dimensions: int = 0
    model: str = ""
    vectors: bytearray = field(default_factory=bytearray)  # float32 rows
    seqs: bytearray = field(default_factory=bytearray)  # uint32 message seq of each row
    stored: int = 0  # where in the stored vectors (bytes; sealed: frames) the rows held end

    @property
    def rows(self) -> int:
        return len(self.seqs) // 4

    @property
    def weight(self) -> int:
        return len(self.vectors) + len(self.seqs) + _BYTES_PER_INDEXED_MESSAGE * len(self.index)

    def same_space(self, stored: StoredVectors) -> bool:
        return (stored.generation, stored.dimensions, stored.model) == (
            self.generation,
            self.dimensions,
            self.model,
        )

    def take(self, stored: StoredVectors) -> None:
        """Keep the rows read; a new generation, model or width replaces what was held."""
        if not self.same_space(stored):
            self.generation, self.dimensions = stored.generation, stored.dimensions
            self.model = stored.model
            self.vectors, self.seqs, self.stored = bytearray(), bytearray(), 0
        if stored.first_row == self.rows:
            count = stored.rows
            self.seqs += stored.seqs[: 4 * count]
            self.vectors += stored.vectors[: 4 * self.dimensions * count]
            self.stored = stored.end

    def cosines(self, query: npt.NDArray[np.float32], ids: npt.NDArray[np.int64]) -> Any:
        """The cosine of each candidate (``ids``, ascending seqs) with the query; -inf for
        candidates without a row."""
        out = np.full(ids.shape[0], -np.inf, np.float32)
        if not self.rows or not ids.shape[0] or query.shape[0] != self.dimensions:
            return out
        matrix = np.frombuffer(self.vectors, dtype="<f4").reshape(-1, self.dimensions)
        seqs = np.frombuffer(self.seqs, dtype="<u4").astype(np.int64)
        at = np.minimum(np.searchsorted(ids, seqs), ids.shape[0] - 1)
        known = ids[at] == seqs
        # einsum's own loop, not BLAS: a matrix-vector product this size is faster on one
        # thread than on BLAS's pool, which contends with the server for the CPUs.
        out[at[known]] = np.einsum("ij,j->i", matrix, query)[known]
        del matrix  # the buffer may grow only once no view of it is left
        return out


class _HeldContexts:
    def __init__(self, contexts: int, budget: int) -> None:
        self._entries: OrderedDict[tuple[str, str, str], _Held] = OrderedDict()
        self._contexts, self._budget = contexts, budget

    def get(self, key: tuple[str, str, str]) -> _Held:
        entry = self._entries.pop(key, None) or _Held()
        self._entries[key] = entry
        while len(self._entries) > 1 and (
            len(self._entries) > self._contexts
            or sum(e.weight for e in self._entries.values()) > self._budget
        ):
            self._entries.popitem(last=False)
        return entry


@dataclass
class SearchService:
    store: MemoryStore
    embedder: Embedder | None
    # consistency=wait: the longest wait, and this process's indexer's news (None: polls only)
    wait_seconds: float = 2.0
    progress: EmbeddingProgress | None = None
    _held: _HeldContexts = field(default_factory=lambda: _HeldContexts(HELD_CONTEXTS, HELD_BYTES))

    async def search(
        self,
        principal: Principal,
        context_id: str,
        query: str,
        top_k: int,
        min_score: float | None = None,
        mode: Mode = "hybrid",
        consistency: Consistency = "eventual",
    ) -> Found:
        if self.embedder is None:
            raise UnsupportedOperationError("Context memory is off (GATEWAY_EMBEDDER=none)")
        if consistency == "wait":
            caught_up = await wait_embedded(
                self.store, principal, context_id, self.wait_seconds, self.progress
            )
            tracing.annotate({"gateway.search.waited": True, "gateway.search.caught_up": caught_up})
        held = self._held.get((principal.tenant, principal.user, context_id))
        async with held.lock:
            stored = await self._refresh(held, principal, context_id)
        model = self.embedder.model_id
        if stored.dimensions and stored.model != model:  # never scored across spaces
            job = job_json(principal.tenant, principal.user, context_id)
            await reembed(self.store, principal, context_id, model, job)
            mode = "text"
        elif stored.reembedding:
            mode = "text"  # by words until every message is embedded by this model
        ids = np.asarray(held.index.ids, np.int64)
        text = held.index.scores(query) if mode != "vector" else np.zeros(ids.shape[0], np.float32)
        vector = np.full(ids.shape[0], -np.inf, np.float32)
        if mode != "text" and held.rows:
            try:
                query_vector = (await self.embedder.embed([query]))[0]
            except EmbedderError as exc:
                raise UnavailableError("The embedder is unavailable; retry later") from exc
            vector = held.cosines(query_vector, ids)
        ranked = rank(mode, top_k, vector, text, min_score)
        wanted = [(principal, context_id, int(ids[r.index])) for r in ranked]
        messages = await self.store.messages_by_seq(wanted)
        hits = [
            SearchHit(
                message.get("messageId"),
                message.get("taskId"),
                round(r.score, 6),
                embeddable_text(message),
            )
            for r, message in zip(ranked, messages, strict=True)
            if message is not None
        ]
        return Found(hits, mode)

    def for_run(self, tenant: str, user: str, context_id: str) -> ContextSearch | None:
        """The search a run's agent is given: over the run's own context (None when context
        memory is off). The composition root hands this to the executor."""
        if self.embedder is None:
            return None
        principal = Principal(tenant, user)

        async def context_search(
            query: str, top_k: int, mode: Mode = "hybrid", consistency: Consistency = "eventual"
        ) -> list[dict[str, Any]]:
            found = await self.search(
                principal, context_id, query, top_k, mode=mode, consistency=consistency
            )
            return [hit_json(h) for h in found.hits]

        return context_search

    async def _refresh(self, held: _Held, principal: Principal, context_id: str) -> StoredVectors:
        """Bring what is held of the context up to date: the vector rows written since the
        last read (all of them after a re-embedding), and the messages for the index."""
        stored = await self.store.vectors(
            principal, context_id, held.rows, held.stored, held.generation
        )
        if stored is not None and held.rows and not held.same_space(stored):
            stored = await self.store.vectors(principal, context_id)
        if stored is None:
            raise ContextNotFoundError()
        held.take(stored)
        if held.last_seq < stored.last_seq:
            messages = await self.store.messages_after(
                principal, context_id, held.last_seq, stored.last_seq
            )
            documents = [
                (seq, text)
                for seq, message in messages
                if message.get("role") == "user" and (text := embeddable_text(message))
            ]
            if len(documents) >= _COUNT_IN_THREAD:  # a first read: keep the loop answering
                held.index.add_counted(await asyncio.to_thread(counted, documents))
            else:
                held.index.add(documents)
            held.last_seq = stored.last_seq
        return stored
