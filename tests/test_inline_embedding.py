"""A send embeds its own message and stores the vector with it (local embedders); the
indexer embeds every message the send did not."""

from __future__ import annotations

import logging
import os
import random
import signal
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest

from gateway.context_memory.embedders import HashingEmbedder, Matrix, WordLlamaEmbedder
from gateway.context_memory.inline import INLINE_MAX_CHARS, InlineEmbedding
from gateway.store.keys import EMBEDS, EMBEDS_GROUP
from tests.agents import Partial
from tests.conftest import AppFactory, RawRedis, post_message, send_task
from tests.processes import PROCESS_SECONDS, serving, slow_process_test, working
from tests.waiting import until

send_echo = partial(send_task, agent="echo")


async def _memory(c: httpx.AsyncClient, cid: str) -> dict[str, int]:
    memory: dict[str, int] = (await c.get(f"/v1/contexts/{cid}")).json()["memory"]
    return memory


async def _indexed(c: httpx.AsyncClient, cid: str, count: int) -> dict[str, int]:
    async def done() -> dict[str, int] | None:
        memory = await _memory(c, cid)
        return memory if memory == {"indexed": count, "pending": 0} else None

    return await until(done, what=f"{count} messages of context {cid} to be indexed")


async def _hits(c: httpx.AsyncClient, cid: str, query: str) -> list[str]:
    r = await c.post(f"/v1/contexts/{cid}:search", json={"query": query, "mode": "vector"})
    assert r.status_code == 200, r.text
    return [hit["text"] for hit in r.json()["hits"]]


@pytest.mark.parametrize("embedder", ["hashing", "wordllama"])
async def test_a_blocking_send_returns_with_its_message_searchable(
    make_app: AppFactory, redis: RawRedis, embedder: str
) -> None:
    """The send script stores the message's vector with the message: when a blocking send
    returns, the message is indexed and no embedding job was queued (on a Redis Cluster
    too: the vectors are the context's keys, in its slot)."""
    async with make_app(embedder=embedder, audit=False) as c:
        task = await send_echo(c, "Allergic to penicillin since childhood")
        cid = task["contextId"]
        await send_echo(c, "Blood glucose was 6.1 mmol/L this morning", contextId=cid)
        assert await _memory(c, cid) == {"indexed": 2, "pending": 0}
        assert await redis.xlen(EMBEDS) == 0
        assert (await _hits(c, cid, "penicillin allergy"))[0].startswith("Allergic")


async def test_a_message_longer_than_a_run_embeds_is_indexed_by_the_indexer(
    make_app: AppFactory,
) -> None:
    """Texts over ``INLINE_MAX_CHARS`` are embedded in the indexer's thread, off the loop."""
    long_text = "Chest pain radiating to the left arm at rest. " * (INLINE_MAX_CHARS // 40)
    assert len(long_text) > INLINE_MAX_CHARS
    async with make_app(embedder="hashing", audit=False) as c:
        cid = (await send_echo(c, long_text))["contextId"]
        await send_echo(c, "Allergic to penicillin since childhood", contextId=cid)
        await _indexed(c, cid, 2)
        assert (await _hits(c, cid, "chest pain"))[0] == long_text


@slow_process_test
async def test_a_server_that_does_not_embed_leaves_every_message_to_the_workers(
    make_app: AppFactory, redis: RawRedis, redis_url: str, tmp_path: Path
) -> None:
    """``GATEWAY_SERVE_EMBEDS=false``: the serving process neither embeds a run's message nor
    runs an indexer; the messages wait queued, and a ``gateway worker`` embeds them."""
    async with make_app(embedder="hashing", audit=False, serve_embeds=False) as c:
        cid = (await send_echo(c, "Allergic to penicillin since childhood"))["contextId"]
        await send_echo(c, "Knee swollen after the fall", contextId=cid)
        assert await _memory(c, cid) == {"indexed": 0, "pending": 2}
        assert await redis.xlen(EMBEDS) == 2
        with working(tmp_path, "embeds", REDIS_URL=redis_url, GATEWAY_EMBEDDER="hashing") as w:
            await _indexed(c, cid, 2)
            assert (await _hits(c, cid, "swollen knee"))[0] == "Knee swollen after the fall"
            # the embedding jobs were read by the worker alone (a consumer is named by its pid)
            consumers = [
                x["name"].decode() for x in await redis.xinfo_consumers(EMBEDS, EMBEDS_GROUP)
            ]
            assert consumers and all(f":{w.pid}:" in name for name in consumers), consumers
            assert not any(f":{os.getpid()}:" in name for name in consumers)


def test_a_send_embeds_what_it_can_and_leaves_the_rest_to_the_indexer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The vector a send stores with its message is the embedder's; too long a text, no
    text, or an embedder that fails gives none (the message's job is then queued)."""
    embedder = HashingEmbedder()
    inline = InlineEmbedding(embedder, 8000)
    vector = inline.vector("an allergy")
    assert vector is not None
    assert (vector.model, vector.dimensions) == ("hashing:256", 256)
    assert vector.vector == embedder.embed_now(["an allergy"])[0].astype("<f4").tobytes()
    assert inline.vector("x" * (INLINE_MAX_CHARS + 1)) is None and inline.vector("") is None
    assert InlineEmbedding(embedder, 10).vector("longer than ten") is None

    class Broken(HashingEmbedder):
        def embed_now(self, texts: Sequence[str]) -> Matrix:
            raise ValueError("a defect")

    with caplog.at_level(logging.ERROR, logger="gateway.memory"):
        assert InlineEmbedding(Broken(), 8000).vector("an allergy") is None
    assert [r.getMessage() for r in caplog.records] == ["embedding failed"]
    assert "allergy" not in caplog.text  # the text is PHI: never logged


async def test_a_message_is_searchable_once_its_send_is_acknowledged(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """The vector is stored with the message: a non-blocking send answers before its run
    has begun its work, and the message is already indexed, with no job queued for it."""
    async with make_app(agents=[Partial()], embedder="hashing", audit=False) as c:
        r = await post_message(
            c,
            "Allergic to penicillin since childhood",
            agent="partial",
            metadata={"sleep": 2},
            configuration={"blocking": False},
        )
        assert r.status_code == 200, r.text
        tid, cid = r.json()["task"]["id"], r.json()["task"]["contextId"]
        assert await _memory(c, cid) == {"indexed": 1, "pending": 0}
        assert (await c.get(f"/v1/tasks/{tid}")).json()["status"]["state"] != "completed"
        assert await _hits(c, cid, "penicillin allergy") == [
            "Allergic to penicillin since childhood"
        ]
        assert await redis.xlen(EMBEDS) == 0
        await until(partial(_in_state, c, tid, "completed"), what="the run to complete")
        assert await _memory(c, cid) == {"indexed": 1, "pending": 0}


async def test_a_message_the_send_could_not_embed_is_embedded_by_the_indexer(
    make_app: AppFactory, redis: RawRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedder that fails in the send (a defect) leaves the message's job queued with
    the message, and the indexer embeds it."""
    async with make_app(embedder="hashing", audit=False) as c:
        inline = c.app.state.runtime.inline  # type: ignore[attr-defined]
        monkeypatch.setattr(inline, "vector", lambda text: None)
        cid = (await send_echo(c, "Knee swollen after the fall"))["contextId"]
        await _indexed(c, cid, 1)
        assert await _hits(c, cid, "swollen knee") == ["Knee swollen after the fall"]
        assert await redis.xlen(EMBEDS) == 0


async def _in_state(c: httpx.AsyncClient, tid: str, state: str) -> bool:
    task = (await c.get(f"/v1/tasks/{tid}")).json()
    return bool(task["status"]["state"] == state)


@slow_process_test
async def test_a_process_killed_during_the_run_loses_no_embedding(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    """A process killed while the run of a message it accepted is under way: the message's
    vector was stored with it; the next process runs the message again and adds nothing."""
    env = {
        "REDIS_URL": redis_url,
        "GATEWAY_EMBEDDER": "hashing",
        "GATEWAY_JOB_LEASE_SECONDS": "1",
        "GATEWAY_REDIS_TIMEOUT_SECONDS": "1",
    }
    with serving(tmp_path, **env) as (first, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:
            r = await post_message(
                c,
                "Allergic to penicillin since childhood",
                agent="partial",
                metadata={"sleep": 30, "once": str(tmp_path / "ran-once")},
                configuration={"blocking": False},
            )
            assert r.status_code == 200, r.text
            tid, cid = r.json()["task"]["id"], r.json()["task"]["contextId"]

            halfway = partial(_in_state, c, tid, "working")
            await until(halfway, what="the run to be half done", logs=tmp_path)
            assert await _memory(c, cid) == {"indexed": 1, "pending": 0}
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=PROCESS_SECONDS)
    with serving(tmp_path, **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:
            done = partial(_in_state, c, tid, "completed")
            await until(done, timeout=45, what="the run to be done again", logs=tmp_path)
            assert await _memory(c, cid) == {"indexed": 1, "pending": 0}
            hits = await _hits(c, cid, "penicillin")
            assert hits == ["Allergic to penicillin since childhood"]
    assert await redis.xlen(EMBEDS) == 0


def test_one_text_embeds_as_in_a_batch() -> None:
    """A run embeds its one message by a path of its own (no batch arrays); the vector is
    the one the indexer's batch gives the same text, to the bit."""
    embedder = WordLlamaEmbedder()
    rng = random.Random(7)
    words = [
        "chest",
        "pain",
        "glucose",
        "mmol/L",
        "arm",
        "▁left",
        "6.1",
        "\n\t",
        "ünïcode",
        "北京",
        "😀",
        "penicillin",
    ]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 60))) for _ in range(200)]
    texts += ["x", "a  b", " leading", "trailing "]
    batch = embedder.embed_now(texts)
    for text, row in zip(texts, batch, strict=True):
        one = embedder.embed_now([text])
        assert one.shape == (1, embedder.dimensions) and one.dtype == np.float32
        assert one[0].tobytes() == row.tobytes(), text
