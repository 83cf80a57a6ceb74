"""Read-your-writes for a context search (``consistency=wait``): wait, for a bounded time,
until the messages a context had queued for embedding are embedded.

The wait reads the context's counters (messages queued, messages embedded or skipped) and
looks again after a pause that doubles from ``FIRST_PAUSE`` to ``LONGEST_PAUSE``, or at
once when this process's indexer writes a batch (``EmbeddingProgress``); an indexer in
another process is seen at the next look. Past the bound the search goes on with what is
embedded: the caller gets the hits there are, not an error.
"""

from __future__ import annotations

import asyncio
import contextlib

from gateway.principal import Principal
from gateway.store.memory_store import MemoryStore

__all__ = ["FIRST_PAUSE", "LONGEST_PAUSE", "EmbeddingProgress", "wait_embedded"]

FIRST_PAUSE = 0.005
LONGEST_PAUSE = 0.1


class EmbeddingProgress:
    """This process's indexer tells the searches waiting here that it wrote a batch."""

    def __init__(self) -> None:
        self._written = asyncio.Event()

    def written(self) -> None:
        """A batch's vectors are stored: wake every search waiting now."""
        self._written.set()
        self._written = asyncio.Event()

    async def next(self, within: float) -> None:
        """Return at the next batch written, or after ``within`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._written.wait(), within)


async def wait_embedded(
    store: MemoryStore,
    principal: Principal,
    context_id: str,
    seconds: float,
    progress: EmbeddingProgress | None = None,
) -> bool:
    """Wait until every message the context has queued so far is embedded (or skipped), for
    at most ``seconds``; True when they are (or the context is gone: the search says so),
    False when the bound ran out first."""
    state = await store.embedding_progress(principal, context_id)
    if state is None or state[1] >= state[0]:
        return True
    queued = state[0]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    pause = FIRST_PAUSE
    while (left := deadline - loop.time()) > 0:
        if progress is not None:
            await progress.next(min(pause, left))
        else:
            await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE)
        state = await store.embedding_progress(principal, context_id)
        if state is None or state[1] >= queued:
            return True
    return False
