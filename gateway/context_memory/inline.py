"""A send embeds its own message and stores the vector with it.

With a local embedder (``LocalEmbedder``: microseconds per text, no network), the process
that accepts a user message embeds its text (up to ``INLINE_MAX_CHARS``; a longer one is left
to the indexer, which embeds it in its thread, off the event loop) before the send's script
runs, and the script adds the vector to the context's vectors in the step that stores the
message. The message is searchable when its send is acknowledged, and no embedding job is
queued for it: there is no window in which a crash could lose it, and nothing for the indexer
to do. A message whose vector is not given (too long, the embedder failed) or is refused (the
context's vectors are of another model or form) has its job queued by the same script, as
before, and the indexer embeds it.
"""

from __future__ import annotations

import logging

from gateway.context_memory.embedders import LocalEmbedder
from gateway.store.redis_store import MessageVector

__all__ = ["INLINE_MAX_CHARS", "InlineEmbedding"]

log = logging.getLogger("gateway.memory")

# Texts longer than this are embedded by the indexer (in its thread, off the event loop).
INLINE_MAX_CHARS = 2_000


class InlineEmbedding:
    def __init__(self, embedder: LocalEmbedder, max_chars: int) -> None:
        self.embedder = embedder
        self._max_chars = min(max_chars, INLINE_MAX_CHARS)

    def vector(self, text: str) -> MessageVector | None:
        """The vector of a message's text (``embeddable_text``), computed here; None when
        there is nothing to embed, the text is longer than a send embeds, or the embedder
        failed (the indexer then takes the message)."""
        if not text or len(text) > self._max_chars:
            return None
        try:
            row = self.embedder.embed_now([text])[0]
        except Exception as exc:  # a defect of the embedder: the indexer takes the message
            log.error("embedding failed", extra={"error": type(exc).__name__})
            return None
        blob = row.astype("<f4", copy=False).tobytes()
        return MessageVector(self.embedder.model_id, self.embedder.dimensions, blob)
