"""Context memory: background embedding, skip rules, search, scrub, isolation, providers."""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import numpy as np
import pytest

from gateway.agents.base import AgentRequest, AgentUpdate, ReplyUpdate, StatusUpdate
from gateway.context_memory.embedders import HashingEmbedder, WordLlamaEmbedder
from gateway.principal import Principal
from gateway.store.keys import EMBEDS_DEAD, keys_of
from gateway.store.memory_store import MemoryStore, VectorBatch
from gateway.store.redis_store import Store
from gateway.store.sealing import Keyring, Sealer
from tests.agents import TestAgent
from tests.conftest import CLUSTER, TEST_KEYRING, AppFactory, RawRedis, auth, send_task
from tests.embeddings_server import EmbeddingsServer, openai_settings
from tests.stored import store_messages
from tests.waiting import WAIT_SECONDS, until


class Replier(TestAgent):
    """Answers with words of its own, so agent text can be told from user text."""

    id = "replier"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        yield ReplyUpdate([{"kind": "text", "text": "zebra xylophone quartz"}])
        yield StatusUpdate("completed")


# Sends go to the echo agent at its own base unless a test names another.
send_echo = partial(send_task, agent="echo")


async def _indexed(c: httpx.AsyncClient, cid: str, headers: Any = None) -> dict[str, int]:
    async def done() -> dict[str, int] | None:
        memory: dict[str, int] = (await c.get(f"/v1/contexts/{cid}", headers=headers)).json()[
            "memory"
        ]
        return memory if memory["pending"] == 0 else None

    return await until(done, what=f"context {cid} to be indexed")


async def _indexed_context(c: httpx.AsyncClient, texts: list[str]) -> str:
    """A new context of one echo turn per text, once every message in it is embedded."""
    cid: str = (await send_echo(c, texts[0]))["contextId"]
    for text in texts[1:]:
        await send_echo(c, text, contextId=cid)
    await _indexed(c, cid)
    return cid


async def _search(c: httpx.AsyncClient, cid: str, query: str, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", None)
    return await c.post(f"/v1/contexts/{cid}:search", json={"query": query, **kw}, headers=headers)


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


async def test_the_message_sharing_words_ranks_first(client: httpx.AsyncClient) -> None:
    cid = (await send_echo(client, "Patient reports chest pain radiating to the left arm"))[
        "contextId"
    ]
    texts = [
        "Allergic to penicillin since childhood",
        "Blood glucose was 6.1 mmol/L this morning",
        "Scheduled for an MRI of the lumbar spine next week",
    ]
    for text in texts:
        await send_echo(client, text, contextId=cid)
    assert await _indexed(client, cid) == {"indexed": 4, "pending": 0}
    for query, expected in [
        ("penicillin allergy", texts[0]),
        ("glucose level", texts[1]),
        ("lumbar MRI", texts[2]),
        ("chest pain", "Patient reports chest pain radiating to the left arm"),
    ]:
        hits = (await _search(client, cid, query)).json()["hits"]
        assert hits[0]["text"] == expected, (query, hits)
        assert hits[0]["score"] >= hits[-1]["score"]
    top = (await _search(client, cid, "penicillin", topK=2)).json()["hits"]
    assert len(top) == 2 and set(top[0]) == {"messageId", "taskId", "score", "text"}
    filtered = (await _search(client, cid, "penicillin", minScore=0.2, mode="vector")).json()
    assert [h["text"] for h in filtered["hits"]] == [texts[0]] and filtered["mode"] == "vector"


async def test_vectors_are_written_after_redis_forgets_its_scripts(
    client: httpx.AsyncClient, redis: RawRedis
) -> None:
    """The indexer's reads and vectors scripts go several to a write; a Redis that lost its
    scripts (a restart, SCRIPT FLUSH) gets the vectors script again from that write."""
    first = await _indexed_context(client, ["Allergic to penicillin since childhood"])
    await redis.script_flush()
    cids = [(await send_echo(client, f"Blood glucose {n} mmol/L"))["contextId"] for n in range(6)]
    for cid in [first, *cids]:
        assert (await _indexed(client, cid))["indexed"] == 1
    hits = (await _search(client, cids[1], "glucose 1", mode="vector")).json()["hits"]
    assert hits[0]["text"] == "Blood glucose 1 mmol/L"


async def test_skip_rules_and_agent_messages_are_never_indexed(make_app: AppFactory) -> None:
    async with make_app(agents=[Replier()]) as c:
        cid = (await send_task(c, "cardiology referral", agent="replier"))["contextId"]
        await send_echo(
            c,
            {"kind": "data", "data": {"medication": {"name": "warfarin", "mg": 5}}},
            agent="replier",
            contextId=cid,
        )
        await send_echo(
            c,
            {"kind": "data", "data": {"$memoryType": "semantic", "note": "hidden"}},
            agent="replier",
            contextId=cid,
        )
        await send_echo(
            c,
            {"kind": "data", "data": {"$targetExpert": "x", "note": "routed"}},
            agent="replier",
            contextId=cid,
        )
        await send_echo(
            c,
            {"kind": "file", "file": {"uri": "https://f.example/scan.png"}},
            agent="replier",
            contextId=cid,
        )
        memory = await _indexed(c, cid)
        assert memory == {"indexed": 2, "pending": 0}  # text, and the plain DataPart only
        assert (await _search(c, cid, "zebra xylophone quartz")).json()["hits"][0]["text"] != (
            "zebra xylophone quartz"
        )
        texts = [h["text"] for h in (await _search(c, cid, "warfarin", topK=50)).json()["hits"]]
        assert texts[0] == "medication.name: warfarin\nmedication.mg: 5"
        assert not any("hidden" in t or "routed" in t or "scan" in t for t in texts)
        assert len(texts) == 2


async def test_scrub_removes_vectors_and_late_jobs_write_nothing(
    client: httpx.AsyncClient, redis: RawRedis
) -> None:
    cid = (await send_echo(client, "renal function declining"))["contextId"]
    await _indexed(client, cid)
    keys = [k async for k in redis.scan_iter(match=f"*{cid}*")]
    assert any(k.endswith(b":vec") for k in keys)
    assert (await client.delete(f"/v1/contexts/{cid}")).status_code == 204
    assert [k async for k in redis.scan_iter(match=f"*{cid}*")] == []
    # An embedding job that arrives after the scrub writes nothing.
    runtime = client.app.state.runtime  # type: ignore[attr-defined]
    from gateway.context_memory.indexer import _Item
    from gateway.principal import Principal

    late = _Item("0-1", Principal("default", "local"), cid, 1)
    await runtime.indexer.index([late])
    assert [k async for k in redis.scan_iter(match=f"*{cid}*")] == []
    assert (await _search(client, cid, "renal")).status_code == 404


async def test_search_is_isolated_per_user(keyed: httpx.AsyncClient) -> None:
    cid = (await send_echo(keyed, "private note about anxiety", headers=auth("alice")))["contextId"]
    await _indexed(keyed, cid, headers=auth("alice"))
    assert (await _search(keyed, cid, "anxiety", headers=auth("alice"))).status_code == 200
    for intruder in ("bob", "carol"):
        r = await _search(keyed, cid, "anxiety", headers=auth(intruder))
        assert r.status_code == 404 and r.json()["error"] == "ContextNotFoundError"


async def test_search_modes_rank_by_meaning_by_words_or_both(make_app: AppFactory) -> None:
    texts = [
        "Blood glucose was 6.1 mmol/L this morning",
        "Lot number AB-7731 recorded for the flu vaccine",
        "Lot number QX-2290 recorded for the flu vaccine",
        "Allergic to penicillin since childhood",
    ]
    async with make_app(embedder="wordllama") as c:
        cid = await _indexed_context(c, texts)

        async def ranked(query: str, mode: str | None) -> tuple[list[str], list[float]]:
            body = await _search(c, cid, query, **({"mode": mode} if mode else {}))
            assert body.status_code == 200 and body.json()["mode"] == (mode or "hybrid")
            hits = body.json()["hits"]
            return [h["text"] for h in hits], [h["score"] for h in hits]

        # No word in common: found by meaning, not by words; hybrid keeps the meaning.
        found, scores = await ranked("sugar levels", "vector")
        assert found[0] == texts[0] and -1 <= scores[-1] <= scores[0] <= 1
        assert await ranked("sugar levels", "text") == ([], [])
        found, scores = await ranked("sugar levels", None)
        assert found[0] == texts[0] and scores[0] == 0.5  # first by meaning, absent by words
        # An exact code: words decide between two messages that mean the same.
        found, scores = await ranked("QX-2290", "text")
        assert found == [texts[2]] and scores[0] > 0
        found, scores = await ranked("QX-2290", "hybrid")
        assert found[0] == texts[2] and scores[0] > scores[1]
        # The lexical index grows with the context: a new message is found by its words.
        await send_echo(c, "Lot number ZK-5120 recorded for the MMR vaccine", contextId=cid)
        found, _ = await ranked("ZK-5120", "text")
        assert found == ["Lot number ZK-5120 recorded for the MMR vaccine"]
        # and, once embedded, by meaning: the rows held by this process grow with it too.
        await _indexed(c, cid)
        found, _ = await ranked("measles mumps rubella vaccine lot", "vector")
        assert found[0] == "Lot number ZK-5120 recorded for the MMR vaccine" and len(found) == 5


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"query": "x", "mode": "semantic"},
        {"query": "x", "mode": None},
        {"query": ""},
        {"query": "x", "topK": 0},
        {"query": "x", "topK": 51},
        {"query": "x", "minScore": 2},
    ],
)
async def test_bad_search_bodies(client: httpx.AsyncClient, body: dict[str, Any]) -> None:
    cid = (await send_echo(client, "x"))["contextId"]
    r = await client.post(f"/v1/contexts/{cid}:search", json=body)
    assert r.status_code == 400 and r.json()["error"] == "InvalidParamsError"


async def test_memory_off_answers_501(make_app: AppFactory) -> None:
    async with make_app(embedder="none") as c:
        cid = (await send_echo(c, "x"))["contextId"]
        r = await _search(c, cid, "x")
        assert r.status_code == 501 and r.json()["error"] == "UnsupportedOperationError"
        assert (await c.get(f"/v1/contexts/{cid}")).json()["memory"] == {"indexed": 0, "pending": 0}


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


async def test_switching_the_embedder_never_scores_across_models(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """hashing and wordllama both make 256 floats: only the model id tells their spaces
    apart. After the switch a context is searched by words until it is re-embedded."""
    texts = [
        "Blood glucose was 6.1 mmol/L this morning",
        "Chest pain radiating to the left arm",
        "Allergic to penicillin since childhood",
    ]
    async with make_app(embedder="hashing") as c:
        cid = await _indexed_context(c, texts)
        other = await _indexed_context(c, ["Knee swollen after the fall"])
        hashed = await redis.get(f"gw:{{{_tag()}}}:c:{cid}:vec")
    meta = f"gw:{{{_tag()}}}:c:{cid}"
    assert await redis.hget(meta, "vmodel") == b"hashing:256"

    async with make_app(embedder="wordllama") as c:
        # The first search finds the foreign vectors: by words, and re-embedding starts.
        first = (await _search(c, cid, "penicillin allergy", mode="vector")).json()
        assert first["mode"] == "text" and first["hits"][0]["text"] == texts[2]
        assert first["hits"][0]["score"] > 1  # a BM25 score, not a cosine
        assert await _indexed(c, cid) == {"indexed": 3, "pending": 0}
        assert await redis.hget(meta, "vmodel") == b"wordllama:l2_supercat:256"
        assert await redis.hget(meta, "vre") is None
        vectors = await redis.get(f"{meta}:vec")
        assert len(await redis.get(f"{meta}:vix")) == 3 * 4 and vectors != hashed  # 3 rows
        # Re-embedded: by meaning again, with words in common or none.
        after = (await _search(c, cid, "sugar levels", mode="vector")).json()
        assert after["mode"] == "vector" and after["hits"][0]["text"] == texts[0]
        assert -1 <= after["hits"][-1]["score"] <= after["hits"][0]["score"] <= 1
        # The indexer meets a foreign context too: a new message re-embeds the whole of it.
        await send_echo(c, "Ibuprofen helps a little", contextId=other)
        assert await _indexed(c, other) == {"indexed": 2, "pending": 0}
        assert await redis.hget(f"gw:{{{_tag()}}}:c:{other}", "vmodel") == (
            b"wordllama:l2_supercat:256"
        )
        hits = (await _search(c, other, "painkiller", mode="vector")).json()
        assert hits["mode"] == "vector" and len(hits["hits"]) == 2


def _tag() -> str:
    from gateway.store.keys import user_tag

    return user_tag("default", "local")


async def test_vectors_that_name_no_model_are_embedded_again(
    client: httpx.AsyncClient, redis: RawRedis
) -> None:
    """Vectors written before they carried their model id are of an unknown space."""
    cid = (await send_echo(client, "Chest pain radiating to the left arm"))["contextId"]
    await send_echo(client, "Allergic to penicillin since childhood", contextId=cid)
    await _indexed(client, cid)
    meta = f"gw:{{{_tag()}}}:c:{cid}"
    await redis.hdel(meta, "vmodel")  # as an older gateway left them
    first = (await _search(client, cid, "penicillin")).json()
    assert first["mode"] == "text" and len(first["hits"]) == 1
    assert await _indexed(client, cid) == {"indexed": 2, "pending": 0}
    assert await redis.hget(meta, "vmodel") == b"wordllama:l2_supercat:256"
    again = (await _search(client, cid, "antibiotic allergy")).json()
    assert again["mode"] == "hybrid" and again["hits"][0]["text"].startswith("Allergic")


@pytest.mark.parametrize("sealed", [True, False], ids=["sealed", "clear"])
async def test_one_script_writes_the_vectors_of_a_users_contexts(
    redis: RawRedis, sealed: bool
) -> None:
    """The indexer's vectors of several contexts go in one script call per user; each
    context gets its own, expiring with it, and a repeated job adds nothing."""
    sealer = Sealer(Keyring.parse(TEST_KEYRING) if sealed else None)
    store = Store(redis, 3600, cluster=CLUSTER, sealer=sealer)
    memory = MemoryStore(store)
    users = {Principal("t", "a"): 5, Principal("t", "b"): 2}
    batches, expected = [], {}
    for principal, count in users.items():
        for n in range(count):
            cid = f"{principal.user}-{n}"
            (seq,) = await store_messages(store, principal, cid, [f"note {n}"])
            vector = np.full(4, n + 1, np.float32).tobytes()
            batches.append(VectorBatch(principal, cid, "m", 4, [(seq, vector)], 0))
            expected[cid] = (principal, vector)
    if not CLUSTER:
        await redis.config_resetstat()
    assert await memory.add_vectors(batches) == [1] * len(batches)
    if not CLUSTER:
        stats = await redis.info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] == len(users)
    for cid, (principal, vector) in expected.items():
        keys = keys_of(principal)
        stored = await memory.vectors(principal, cid)
        assert stored is not None and stored.rows == 1 and stored.vectors == vector
        ck = keys.context(cid)
        for key in (ck.vectors, ck.vector_seqs, ck.vector_bits):
            assert 0 < await redis.pttl(key) <= 3_600_000
    assert await memory.add_vectors(batches) == [0] * len(batches)
