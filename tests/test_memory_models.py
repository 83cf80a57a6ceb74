"""Context memory across embedding models: switching the embedder never scores across
models, vectors that name no model are embedded again, and one script writes the vectors of
a user's contexts."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from gateway.principal import Principal
from gateway.store.keys import keys_of
from gateway.store.memory_store import MemoryStore, VectorBatch
from gateway.store.redis_store import Store
from gateway.store.sealing import Keyring, Sealer
from tests.conftest import CLUSTER, TEST_KEYRING, AppFactory, RawRedis
from tests.memory_contexts import _indexed, _indexed_context, _search, send_echo
from tests.stored import store_messages


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
