"""Memory, from settings: the embedder and the search over a context's messages (context
memory), and Cortadel's long-term memory when it is enabled."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.context_memory.embedders import Embedder
from gateway.context_memory.factory import build_embedder
from gateway.context_memory.progress import EmbeddingProgress
from gateway.longterm.cortadel import Cortadel
from gateway.longterm.recall import LongTermMemory
from gateway.runtime.stores import Stores
from gateway.service.search import SearchService
from gateway.settings import Settings
from gateway.store.longterm_store import LongTermStore
from gateway.store.memory_store import MemoryStore

__all__ = ["Memory"]


@dataclass
class Memory:
    embedder: Embedder | None  # None: GATEWAY_EMBEDDER=none, nothing is embedded
    # this process's indexer tells its waiting searches
    progress: EmbeddingProgress
    search: SearchService
    cortadel: Cortadel | None  # None: long-term memory is off
    longterm: LongTermMemory | None

    @classmethod
    def build(cls, settings: Settings, stores: Stores) -> Memory:
        cortadel = Cortadel(settings.cortadel) if settings.cortadel.enabled else None
        longterm = None
        if cortadel is not None:
            defaults = settings.cortadel.options()
            longterm = LongTermMemory(cortadel, LongTermStore(stores.store), defaults, stores.audit)
        embedder = build_embedder(settings)
        progress = EmbeddingProgress()
        search = SearchService(
            MemoryStore(stores.store), embedder, settings.search_wait_seconds, progress
        )
        return cls(embedder, progress, search, cortadel, longterm)
