"""A run embeds its own message and adds the vector with its last write.

The send script queues every embeddable user message on the embedding stream, as always.
With a local embedder (``LocalEmbedder``: microseconds per text, no network) on a
standalone Redis, the run that answers the message in this process does that job itself:
the message's text (up to ``INLINE_MAX_CHARS``; a longer one stays with the indexer's
thread) is embedded while the send's script is under way, and the run's last write (the
update script) adds the vector and deletes the job in the same step. The indexer's work
for the message (reading the job, reading the message back and opening it, a vectors
script, the acknowledgement) is not done at all.

The runs and the indexer of a process share one ``InlineEmbedding``. A job whose run has
claimed it is not the indexer's: read while the run is under way, the indexer keeps its
lease (a run may outlast it) without handling it, lets it go once the run's write added the
vector and takes it back otherwise; read before the write and handled after it, it is
dropped. The job stays in the stream until a vector
is added, whoever adds it, so a crash at any point loses nothing; where both write, the
second adds nothing (the seq is already embedded).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from gateway import metrics
from gateway.context_memory.embedders import LocalEmbedder
from gateway.store.jobs import Entry
from gateway.store.redis_store import RunVector

__all__ = ["INLINE_MAX_CHARS", "InlineEmbedding"]

log = logging.getLogger("gateway.memory")

# Texts longer than this are embedded by the indexer (in its thread, off the event loop).
INLINE_MAX_CHARS = 2_000
# How many written jobs are remembered for an indexer that read them before the write.
_WRITTEN_KEPT = 16_384


class InlineEmbedding:
    def __init__(self, embedder: LocalEmbedder, max_chars: int) -> None:
        self.embedder = embedder
        self._max_chars = min(max_chars, INLINE_MAX_CHARS)
        self._claimed: set[str] = set()  # jobs a run here is about to write
        self._written: dict[str, None] = {}  # jobs written by runs here, oldest first
        self._let_go: dict[str, Entry] = {}  # claimed jobs the indexer read and let go
        self._returned: list[Entry] = []  # those whose run did not add the vector
        # The indexer's: stop renewing the lease of jobs it read whose run added the vector.
        self.release: Callable[[list[str]], None] = lambda entries: None

    def begin(self, text: str) -> asyncio.Future[bytes | None] | None:
        """Start embedding the text of a message about to be sent (``embeddable_text``;
        None: nothing to embed, or too long and left to the indexer). The vector (its
        float32 bytes; None if the embedder failed, and the indexer takes the job) is
        computed on the event loop once the send's script is written: the multiplexed
        connection writes at the end of the loop's turn, so the computation is put two
        turns ahead, and runs while Redis runs the script.
        """
        if not text or len(text) > self._max_chars:
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bytes | None] = loop.create_future()
        loop.call_soon(loop.call_soon, self._compute, text, future)
        return future

    def _compute(self, text: str, future: asyncio.Future[bytes | None]) -> None:
        if future.done():
            return
        try:
            vector: bytes | None = (
                self.embedder.embed_now([text])[0].astype("<f4", copy=False).tobytes()
            )
        except Exception as exc:  # a defect of the embedder: the indexer takes the job
            log.error("embedding failed", extra={"error": type(exc).__name__})
            vector = None
        future.set_result(vector)

    def claim(self, entry: str) -> None:
        """A run here embeds its message (embedding job ``entry``) itself; it settles the
        claim whatever happens (``settle``)."""
        self._claimed.add(entry)

    async def vector(
        self, entry: str, seq: int, embedding: asyncio.Future[bytes | None]
    ) -> RunVector | None:
        """The vector of a claimed message (seq ``seq``) begun with ``begin``, or None."""
        vector = await embedding
        if vector is None:
            return None
        return RunVector(entry, self.embedder.model_id, self.embedder.dimensions, seq, vector)

    def settle(self, entry: str, embedded: bool) -> None:
        """The claimed job's run is over: its write added the vector (the job is gone from
        the stream), or not (the job is the indexer's again)."""
        self._claimed.discard(entry)
        held = self._let_go.pop(entry, None)
        if embedded:
            metrics.EMBEDDED.inc()
            if held is None:  # the indexer may have read it and not handled it yet
                self._written[entry] = None
                if len(self._written) > _WRITTEN_KEPT:
                    del self._written[next(iter(self._written))]
            else:
                self.release([entry])
        elif held is not None:
            self._returned.append(held)

    def held(self) -> list[str]:
        """The claimed jobs the indexer read: it keeps their lease until their run settles."""
        return list(self._let_go)

    def for_indexer(self, entries: list[Entry]) -> list[Entry]:
        """Of the entries the indexer read, those it handles: not a job a run here has
        claimed (set aside until the run settles it) or written (done)."""
        if not self._claimed and not self._written:
            return entries
        mine = []
        for entry in entries:
            name = entry[0]
            if name in self._claimed:
                self._let_go[name] = entry
            elif name in self._written:
                del self._written[name]
            else:
                mine.append(entry)
        return mine

    def returned(self, count: int) -> list[Entry]:
        """Up to ``count`` of the jobs handed back to the indexer."""
        entries, self._returned = self._returned[:count], self._returned[count:]
        return entries
