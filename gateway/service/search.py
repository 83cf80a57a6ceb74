"""Search within a context: by meaning (cosine over its stored vectors), by words (BM25
over its user messages' embedded text), or both fused (see ``gateway.memory.ranking``).

A context whose vectors are of another model than the embedder's is searched by words, and
queued for re-embedding (``gateway.memory.reembed``); so is one being re-embedded.

The lexical index of a context is built in this process from the messages themselves, the
first time the context is searched, and extended with the messages added since at each
later search; a bounded number of contexts are kept, least recently searched first out.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gateway.errors import ContextNotFoundError, UnavailableError, UnsupportedOperationError
from gateway.memory.embedders import Embedder, EmbedderError
from gateway.memory.lexical import LexicalIndex
from gateway.memory.ranking import Mode, rank
from gateway.memory.reembed import job_json, reembed
from gateway.memory.text import embeddable_text
from gateway.principal import Principal
from gateway.store.keys import UserKeys
from gateway.store.memory_store import MemoryStore, StoredVectors

__all__ = ["Found", "SearchService"]

# Lexical indexes kept per process: at most this many contexts, and this many messages.
CACHED_CONTEXTS = 256
CACHED_MESSAGES = 500_000


@dataclass(frozen=True)
class Found:
    """Hits ``{messageId, taskId, score, text}``, best first, and the ranking applied."""

    hits: list[dict[str, Any]]
    mode: Mode


@dataclass
class _Lexical:
    index: LexicalIndex = field(default_factory=LexicalIndex)
    last_seq: int = 0  # messages up to this seq are in the index


class _LexicalCache:
    def __init__(self, contexts: int, messages: int) -> None:
        self._entries: OrderedDict[str, _Lexical] = OrderedDict()
        self._contexts, self._messages = contexts, messages

    def get(self, key: str) -> _Lexical:
        entry = self._entries.pop(key, None) or _Lexical()
        self._entries[key] = entry
        while len(self._entries) > 1 and (
            len(self._entries) > self._contexts
            or sum(len(e.index) for e in self._entries.values()) > self._messages
        ):
            self._entries.popitem(last=False)
        return entry


@dataclass
class SearchService:
    store: MemoryStore
    embedder: Embedder | None
    _lexical: _LexicalCache = field(
        default_factory=lambda: _LexicalCache(CACHED_CONTEXTS, CACHED_MESSAGES)
    )

    async def search(
        self,
        principal: Principal,
        context_id: str,
        query: str,
        top_k: int,
        min_score: float | None = None,
        mode: Mode = "hybrid",
    ) -> Found:
        if self.embedder is None:
            raise UnsupportedOperationError("Context memory is off (GATEWAY_EMBEDDER=none)")
        stored = await self.store.vectors(principal.keys, context_id)
        if stored is None:
            raise ContextNotFoundError()
        model = self.embedder.model_id
        if stored.dimensions and stored.model != model:  # never scored across spaces
            job = job_json(principal.tenant, principal.user, context_id)
            await reembed(self.store, principal.keys, context_id, model, job)
            mode = "text"
        elif stored.reembedding:
            mode = "text"  # by words until every message is embedded by this model
        index = await self._index(principal.keys, context_id, stored.last_seq)
        ids = np.asarray(index.ids, np.int64)
        text = index.scores(query) if mode != "vector" else np.zeros(ids.shape[0], np.float32)
        vector = np.full(ids.shape[0], -np.inf, np.float32)
        if mode != "text" and stored.vectors and stored.dimensions:
            await self._score_vectors(stored, query, ids, vector)
        ranked = rank(mode, top_k, vector, text, min_score)
        wanted = [(principal.keys, context_id, int(ids[r.index])) for r in ranked]
        messages = await self.store.messages_by_seq(wanted)
        hits = [
            {
                "messageId": message.get("messageId"),
                "taskId": message.get("taskId"),
                "score": round(r.score, 6),
                "text": embeddable_text(message),
            }
            for r, message in zip(ranked, messages, strict=True)
            if message is not None
        ]
        return Found(hits, mode)

    async def _score_vectors(
        self,
        stored: StoredVectors,
        query: str,
        ids: np.ndarray[Any, Any],
        out: np.ndarray[Any, Any],
    ) -> None:
        """Write the cosine of each embedded candidate into ``out`` (aligned with ``ids``)."""
        assert self.embedder is not None
        try:
            query_vector = (await self.embedder.embed([query]))[0]
        except EmbedderError as exc:
            raise UnavailableError("The embedder is unavailable; retry later") from exc
        if query_vector.shape[0] != stored.dimensions:
            return
        matrix = np.frombuffer(stored.vectors, dtype="<f4").reshape(-1, stored.dimensions)
        seqs = np.frombuffer(stored.seqs, dtype="<u4").astype(np.int64)
        at = np.minimum(np.searchsorted(ids, seqs), max(ids.shape[0] - 1, 0))
        known = ids[at] == seqs if ids.shape[0] else np.zeros(seqs.shape[0], np.bool_)
        out[at[known]] = (matrix @ query_vector)[known]

    async def _index(self, keys: UserKeys, context_id: str, last_seq: int) -> LexicalIndex:
        """The context's lexical index, brought up to ``last_seq``."""
        entry = self._lexical.get(f"{keys.prefix}|{context_id}")
        if entry.last_seq < last_seq:
            start = entry.last_seq
            messages = await self.store.messages_after(keys, context_id, start, last_seq)
            if entry.last_seq == start:  # no concurrent search extended it meanwhile
                entry.index.add(
                    (seq, text)
                    for seq, message in messages
                    if message.get("role") == "user" and (text := embeddable_text(message))
                )
                entry.last_seq = last_seq
        return entry.index
