"""Semantic search within a context: cosine similarity over its stored vectors (numpy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gateway.errors import ContextNotFoundError, UnavailableError, UnsupportedOperationError
from gateway.memory.embedders import Embedder, EmbedderError
from gateway.memory.text import embeddable_text
from gateway.principal import Principal
from gateway.store.memory_store import MemoryStore

__all__ = ["SearchService"]


@dataclass
class SearchService:
    store: MemoryStore
    embedder: Embedder | None

    async def search(
        self,
        principal: Principal,
        context_id: str,
        query: str,
        top_k: int,
        min_score: float | None = None,
    ) -> list[dict[str, Any]]:
        """Hits ``{messageId, taskId, score, text}``, best first."""
        if self.embedder is None:
            raise UnsupportedOperationError("Context memory is off (GATEWAY_EMBEDDER=none)")
        stored = await self.store.vectors(principal.keys, context_id)
        if stored is None:
            raise ContextNotFoundError()
        blob, seq_blob, dimensions = stored
        if not blob or not dimensions:
            return []
        try:
            query_vector = (await self.embedder.embed([query]))[0]
        except EmbedderError as exc:
            raise UnavailableError("The embedder is unavailable; retry later") from exc
        if query_vector.shape[0] != dimensions:
            return []
        matrix = np.frombuffer(blob, dtype="<f4").reshape(-1, dimensions)
        seqs = np.frombuffer(seq_blob, dtype="<u4")
        scores = matrix @ query_vector
        k = min(top_k, scores.shape[0])
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        if min_score is not None:
            best = best[scores[best] >= min_score]
        wanted = [(principal.keys, context_id, int(seqs[i])) for i in best]
        messages = await self.store.messages_by_seq(wanted)
        return [
            {
                "messageId": message.get("messageId"),
                "taskId": message.get("taskId"),
                "score": round(float(scores[i]), 6),
                "text": embeddable_text(message),
            }
            for i, message in zip(best, messages, strict=True)
            if message is not None
        ]
