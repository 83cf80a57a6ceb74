"""The embedder the settings ask for."""

from __future__ import annotations

from gateway.context_memory.embedders import (
    Embedder,
    HashingEmbedder,
    OpenAIEmbedder,
    WordLlamaEmbedder,
)
from gateway.settings import Settings

__all__ = ["build_embedder"]


def build_embedder(settings: Settings) -> Embedder | None:
    if settings.embedder == "none":
        return None
    if settings.embedder == "wordllama":
        return WordLlamaEmbedder()
    if settings.embedder == "hashing":
        return HashingEmbedder(settings.embedder_dimensions or 256)
    key = settings.embedder_api_key.get_secret_value() if settings.embedder_api_key else ""
    return OpenAIEmbedder(
        base_url=settings.embedder_url,
        model=settings.embedder_model,
        api_key=key,
        dimensions=settings.embedder_dimensions,
        timeout=settings.embedder_timeout_seconds,
        max_batch=settings.embedder_batch_size,
    )
