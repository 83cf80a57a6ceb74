"""Context memory's embedders and providers: hashing and wordllama vectors, the OpenAI
provider end to end, and an embedder that is slow, down longer than a lease, or given
poison or over-long input, none of which reaches the request path or loses a message."""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

import numpy as np
import pytest

from gateway.context_memory.embedders import HashingEmbedder, WordLlamaEmbedder
from gateway.store.keys import EMBEDS_DEAD
from tests.conftest import AppFactory, RawRedis
from tests.embeddings_server import EmbeddingsServer, openai_settings
from tests.memory_contexts import _indexed, _indexed_context, _search, send_echo
from tests.waiting import WAIT_SECONDS, until


def test_hashing_is_deterministic_and_normalised() -> None:
    a, b = HashingEmbedder(), HashingEmbedder()
    va = asyncio.run(a.embed(["Blood pressure 120/80, patient calm"]))
    vb = asyncio.run(b.embed(["Blood pressure 120/80, patient calm"]))
    assert np.array_equal(va, vb)
    assert va.dtype == np.float32 and va.shape == (1, 256)
    assert abs(float(np.linalg.norm(va[0])) - 1.0) < 1e-5


def test_wordllama_loads_from_its_wheel_and_is_normalised() -> None:
    a, b = WordLlamaEmbedder(), WordLlamaEmbedder()
    va = asyncio.run(a.embed(["Blood pressure 120/80, patient calm", ""]))
    assert np.array_equal(va, asyncio.run(b.embed(["Blood pressure 120/80, patient calm", ""])))
    assert va.dtype == np.float32 and va.shape == (2, 256) and a.dimensions == 256
    assert abs(float(np.linalg.norm(va[0])) - 1.0) < 1e-5 and not va[1].any()
    # The mean of the token rows of the tokenizer's full encoding (with offsets and all).
    ids = a._tokenizer.encode("Blood pressure 120/80, patient calm", add_special_tokens=False).ids
    mean = a._table[ids].astype(np.float32).mean(axis=0)
    assert np.allclose(va[0], mean / np.linalg.norm(mean), atol=1e-5)
    many = asyncio.run(a.embed([f"note {i}" for i in range(20)]))  # off the event loop
    assert many.shape == (20, 256)
    # The package's own loader (which downloads what it lacks) is never imported.
    assert "wordllama.wordllama" not in sys.modules


def test_wordllama_piece_cache_gives_the_tokenizers_ids_and_vectors() -> None:
    cached, plain = WordLlamaEmbedder(), WordLlamaEmbedder(piece_cache=False)
    assert cached._pieces and not plain._pieces
    words = [
        *("Pt", "c/o", "SOB", "x3d,", "BP", "150/95;", "hx", "of", "CHF", "&", "afib."),
        *("Über", "naïve", "café", "中文", "😀", "✓", "warfarin", "5mg", "q.d.", "--"),
        *("follow-up", "in", "2wks", "(see", "note", "#4)", "\u2581under\u2581score"),
    ]
    rng = random.Random(7)
    texts = ["", " ", "   ", "\n", "\u2581", "a\u2581b", " lead", "trail  ", "x" * 300]
    for _ in range(400):
        seps = [rng.choice([" ", "  ", "\n", "\t", " \t ", ""]) for _ in range(rng.randint(0, 40))]
        text = "".join(rng.choice(words) + sep for sep in seps)
        texts.append(rng.choice(["", " ", "  "]) + text)
    for text in texts:
        expected = cached._tokenizer.encode(text, add_special_tokens=False).ids
        assert cached.token_ids([text]) == [expected], repr(text)
    assert cached.token_ids(texts) == plain.token_ids(texts)
    assert np.array_equal(cached.embed_now(texts), plain.embed_now(texts))


def test_wordllama_word_cache_is_bounded_and_still_gives_the_tokenizers_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.context_memory import embedders

    monkeypatch.setattr(embedders, "_WORD_IDS", {})
    monkeypatch.setattr(embedders, "_WORD_IDS_MAX", 50)
    cached = WordLlamaEmbedder()
    rng = random.Random(11)
    words = [f"dose{n}mg" for n in range(120)] + ["aspirin", "chest", "pain"]
    for _ in range(60):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
        expected = cached._tokenizer.encode(text, add_special_tokens=False).ids
        assert cached.token_ids([text]) == [expected], text
        assert len(embedders._WORD_IDS) <= 50


async def test_wordllama_finds_meaning_without_shared_words(make_app: AppFactory) -> None:
    texts = [
        "Complains of shortness of breath when climbing stairs",
        "Allergic to penicillin since childhood",
        "Blood glucose was 6.1 mmol/L this morning",
        "Chest pain radiating to the left arm",
    ]
    async with make_app(embedder="wordllama") as c:
        cid = await _indexed_context(c, texts)
        for query, expected in [("sugar levels", 2), ("heart attack symptoms", 3)]:
            hits = (await _search(c, cid, query)).json()["hits"]
            assert hits[0]["text"] == texts[expected], (query, hits)


def _openai(embeddings: EmbeddingsServer, **extra: Any) -> dict[str, Any]:
    return openai_settings(embeddings, **{"embedder_batch_size": 8, **extra})


async def test_openai_provider_end_to_end(
    make_app: AppFactory, embeddings: EmbeddingsServer
) -> None:
    async with make_app(**_openai(embeddings, embedder_dimensions=32)) as c:
        cid = (await send_echo(c, "hemoglobin low"))["contextId"]
        await send_echo(c, "knee surgery planned", contextId=cid)
        await _indexed(c, cid)
        hits = (await _search(c, cid, "knee surgery")).json()["hits"]
    assert hits[0]["text"] == "knee surgery planned"
    assert embeddings.errors == []
    assert all(
        call["encoding_format"] == "float" and call["dimensions"] == 32 for call in embeddings.calls
    )


async def test_slow_embedder_is_not_on_the_request_path(
    make_app: AppFactory, embeddings: EmbeddingsServer
) -> None:
    """The embedder holds every call until the test releases it (and the gateway would wait
    for it that long): a send that waited for its message's embedding would not return."""
    embeddings.hold()
    async with make_app(**_openai(embeddings, embedder_timeout_seconds=600)) as c:
        try:
            async with asyncio.timeout(WAIT_SECONDS):
                task = await send_echo(c, "slow to embed")
        except TimeoutError:
            raise AssertionError(
                f"the send waited for its embedding ({embeddings.held} call(s) held)"
            ) from None
        memory = (await c.get(f"/v1/contexts/{task['contextId']}")).json()["memory"]
        assert task["status"]["state"] == "completed"
        assert memory == {"indexed": 0, "pending": 1}  # the send did not wait for it
        await until(lambda: embeddings.held == 1, what="the embedding to be held at the embedder")
        embeddings.release()
        assert await _indexed(c, task["contextId"]) == {"indexed": 1, "pending": 0}


async def test_embedder_outage_loses_nothing(
    make_app: AppFactory, embeddings: EmbeddingsServer
) -> None:
    embeddings.fail_next = [500, 503, 429, 500]
    async with make_app(**_openai(embeddings)) as c:
        cid = (await send_echo(c, "first"))["contextId"]
        for i in range(5):
            assert (await send_echo(c, f"note {i}", contextId=cid))["status"][
                "state"
            ] == "completed"
        assert await _indexed(c, cid) == {"indexed": 6, "pending": 0}
        assert len((await _search(c, cid, "note", topK=50)).json()["hits"]) == 6
    assert embeddings.fail_next == []


async def test_an_outage_longer_than_the_lease_keeps_the_jobs(
    make_app: AppFactory, embeddings: EmbeddingsServer, redis: RawRedis
) -> None:
    """While the indexer waits out the embedder, it renews its jobs' lease: maintenance must
    neither requeue nor dead-letter them (it used to, once the outage outlasted the lease)."""
    embeddings.fail_next = [503] * 8  # ~2.3 s of retries at a 0.3 s backoff cap
    settings = _openai(embeddings, embedder_backoff_max_seconds=0.3)
    async with make_app(**settings, job_lease_seconds=1.0, job_max_attempts=1) as c:
        cid = (await send_echo(c, "outlasting the lease"))["contextId"]
        assert await _indexed(c, cid) == {"indexed": 1, "pending": 0}
    assert embeddings.fail_next == []
    assert await redis.xlen(EMBEDS_DEAD) == 0


async def test_poison_input_is_skipped_and_long_input_truncated(
    make_app: AppFactory, embeddings: EmbeddingsServer
) -> None:
    async with make_app(**_openai(embeddings, embedder_max_chars=1000)) as c:
        cid = (await send_echo(c, "ok before"))["contextId"]
        await send_echo(c, "POISON pill", contextId=cid)
        await send_echo(c, "long " * 10_000, contextId=cid)
        await send_echo(c, "ok after", contextId=cid)
        assert await _indexed(c, cid) == {"indexed": 4, "pending": 0}
        texts = {h["text"][:9] for h in (await _search(c, cid, "ok long", topK=50)).json()["hits"]}
    assert texts == {"ok before", "ok after", "long long"}
    assert all(len(t) <= 1000 for call in embeddings.calls for t in call["input"])
