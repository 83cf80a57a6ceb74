"""The texts a serving process's sends hand to its own indexer (``EmbedTexts``): embedded in
place of the message read back; a job whose text is not handed over is read back; and the
seq bits a context's first vectors write as one value are those SETBIT would set."""

from __future__ import annotations

import uuid

import numpy as np

from gateway.context_memory.embedders import HashingEmbedder
from gateway.context_memory.indexer import Indexer
from gateway.principal import Principal
from gateway.store.embed_texts import EmbedTexts
from gateway.store.jobs import JobStore
from gateway.store.keys import EMBEDS, EMBEDS_DEAD, EMBEDS_GROUP, keys_of
from gateway.store.memory_store import MemoryStore, VectorBatch
from gateway.store.redis_store import Store
from gateway.store.sealing import Keyring, Sealer
from tests.conftest import CLUSTER, TEST_KEYRING, RawRedis
from tests.stored import store_messages


async def test_the_indexer_embeds_the_texts_handed_over_and_reads_back_the_others(
    redis: RawRedis,
) -> None:
    store = Store(redis, 3600, cluster=CLUSTER, sealer=Sealer(Keyring.parse(TEST_KEYRING)))
    texts = store.embed_texts = EmbedTexts()
    jobs = JobStore(redis, EMBEDS, EMBEDS_GROUP, EMBEDS_DEAD)
    await jobs.ensure_group()
    embedder = HashingEmbedder()
    memory = MemoryStore(store)
    indexer = Indexer(
        memory, jobs, embedder, consumer="handoff", batch_size=16, max_chars=8000,
        block_ms=1, lease_seconds=60, linger=0,
    )  # fmt: skip
    principal = Principal("t", f"handoff-{uuid.uuid4().hex[:8]}")
    prefix = keys_of(principal).prefix
    [handed] = await store_messages(
        store, principal, "ctx-handed", ["Chest pain radiating to the arm"], embed=True
    )
    [other] = await store_messages(
        store, principal, "ctx-other", ["Allergic to penicillin"], embed=True
    )
    assert len(texts) == 2
    # What the indexer embeds for the first is the text handed over (told apart here by
    # handing over another); the second's is not here, as another process's job: read back.
    texts.put(prefix, "ctx-handed", handed, "Knee swollen after the fall")
    assert texts.take(prefix, "ctx-other", other) == "Allergic to penicillin"
    entries = await jobs.read("handoff", 16, None)
    assert len(entries) == 2
    await indexer.process(entries)
    assert len(texts) == 0 and await jobs.read("handoff", 16, None) == []
    for cid, text in (
        ("ctx-handed", "Knee swollen after the fall"),
        ("ctx-other", "Allergic to penicillin"),
    ):
        stored = await memory.vectors(principal, cid)
        assert stored is not None and stored.rows == 1
        assert stored.vectors == embedder.embed_now([text]).astype("<f4").tobytes()


def test_the_hand_off_holds_a_bounded_number_of_texts() -> None:
    texts = EmbedTexts(capacity=3)
    for seq in range(1, 6):
        texts.put("p", "c", seq, f"text {seq}")
    assert len(texts) == 3
    assert texts.take("p", "c", 1) is None and texts.take("p", "c", 2) is None  # the oldest
    assert texts.take("p", "c", 5) == "text 5" and texts.take("p", "c", 5) is None


def test_the_hand_off_holds_a_bounded_number_of_characters() -> None:
    texts = EmbedTexts(chars=10)
    texts.put("p", "c", 1, "abcd")
    texts.put("p", "c", 2, "efgh")
    texts.put("p", "c", 3, "ijkl")  # 12 characters: the oldest goes
    texts.put("p", "c", 4, "x" * 11)  # longer than the whole budget: not held
    assert texts.take("p", "c", 1) is None and texts.take("p", "c", 4) is None
    assert texts.take("p", "c", 2) == "efgh" and texts.take("p", "c", 3) == "ijkl"
    texts.put("p", "c", 5, "y" * 10)  # what was taken no longer counts
    texts.put("p", "c", 5, "z" * 10)  # nor what a text handed over again replaced
    assert len(texts) == 1 and texts.take("p", "c", 5) == "z" * 10


async def test_a_contexts_first_vectors_set_the_bits_setbit_would(redis: RawRedis) -> None:
    """Seqs across several bytes of the bitmap; a later batch repeating one adds the rest."""
    store = Store(redis, 3600, cluster=CLUSTER, sealer=Sealer(Keyring.parse(TEST_KEYRING)))
    memory = MemoryStore(store)
    principal = Principal("t", f"bits-{uuid.uuid4().hex[:8]}")
    cid = "ctx-bits"
    seqs = await store_messages(store, principal, cid, [f"note {n}" for n in range(20)])
    first = [seqs[2], seqs[8], seqs[16], seqs[7]]

    def batch(chosen: list[int]) -> VectorBatch:
        rows = [(seq, np.full(4, seq, np.float32).tobytes()) for seq in chosen]
        return VectorBatch(principal, cid, "m", 4, rows, 0)

    assert await memory.add_vectors([batch(first)]) == [4]
    bits = keys_of(principal).context(cid).vector_bits
    stored = await redis.get(bits)
    expected = bytearray(max(first) // 8 + 1)
    for seq in first:
        expected[seq // 8] |= 0x80 >> (seq % 8)
    assert stored == bytes(expected)
    assert 0 < await redis.pttl(bits) <= 3_600_000
    assert await memory.add_vectors([batch([seqs[8], seqs[11]])]) == [1]
    assert await redis.getbit(bits, seqs[11]) == 1
    vectors = await memory.vectors(principal, cid)
    assert vectors is not None and vectors.rows == 5
