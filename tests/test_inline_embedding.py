"""A run embeds its own message and adds the vector with its last write (local embedders,
standalone Redis); the indexer keeps every job the run does not finish."""

from __future__ import annotations

import os
import random
import signal
from functools import partial
from pathlib import Path

import httpx
import numpy as np
import pytest

from gateway.context_memory.embedders import HashingEmbedder, WordLlamaEmbedder
from gateway.context_memory.inline import INLINE_MAX_CHARS, InlineEmbedding
from gateway.store.keys import EMBEDS, EMBEDS_GROUP
from tests.agents import Partial
from tests.conftest import CLUSTER, AppFactory, RawRedis, post_message, send_task
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


async def _in_state(c: httpx.AsyncClient, tid: str, state: str) -> bool:
    task = (await c.get(f"/v1/tasks/{tid}")).json()
    return bool(task["status"]["state"] == state)


async def _hits(c: httpx.AsyncClient, cid: str, query: str) -> list[str]:
    r = await c.post(f"/v1/contexts/{cid}:search", json={"query": query, "mode": "vector"})
    assert r.status_code == 200, r.text
    return [hit["text"] for hit in r.json()["hits"]]


@pytest.mark.parametrize("embedder", ["hashing", "wordllama"])
async def test_a_blocking_send_returns_with_its_message_searchable(
    make_app: AppFactory, redis: RawRedis, embedder: str
) -> None:
    """The run's last write adds the message's vector and ends its embedding job in the same
    step: when a blocking send returns, the message is indexed and nothing is left queued.
    On a Redis Cluster (the streams in another slot) the indexer does it, soon after."""
    async with make_app(embedder=embedder, audit=False) as c:
        task = await send_echo(c, "Allergic to penicillin since childhood")
        cid = task["contextId"]
        await send_echo(c, "Blood glucose was 6.1 mmol/L this morning", contextId=cid)
        if CLUSTER:
            memory = await _indexed(c, cid, 2)
        else:
            memory = await _memory(c, cid)
            assert await redis.xlen(EMBEDS) == 0
            assert (await redis.xpending(EMBEDS, EMBEDS_GROUP))["pending"] == 0
        assert memory == {"indexed": 2, "pending": 0}
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


async def test_a_message_sent_without_waiting_is_indexed_by_its_run(
    make_app: AppFactory,
) -> None:
    """A non-blocking send returns first; the run then adds the vector with its last write."""
    async with make_app(embedder="hashing", audit=False) as c:
        r = await post_message(
            c, "Knee swollen after the fall", agent="echo", configuration={"blocking": False}
        )
        assert r.status_code == 200, r.text
        cid = r.json()["task"]["contextId"]
        await _indexed(c, cid, 1)
        assert await _hits(c, cid, "swollen knee") == ["Knee swollen after the fall"]


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


async def test_jobs_a_run_claims_are_the_indexers_again_unless_it_adds_the_vector() -> None:
    """The hand-over between runs and the indexer of one process (pure bookkeeping)."""
    inline = InlineEmbedding(HashingEmbedder(), 8000)
    released: list[str] = []
    inline.release = released.extend
    entry = ("1-0", {b"job": b"{}", b"seq": b"1"})
    other = ("2-0", {b"job": b"{}", b"seq": b"1"})
    # Claimed and under way: the indexer sets it aside (keeping its lease); the run's write
    # added nothing, so it is the indexer's again.
    inline.claim("1-0")
    assert inline.for_indexer([entry, other]) == [other]
    assert inline.held() == ["1-0"]
    inline.settle("1-0", embedded=False)
    assert inline.returned(10) == [entry] and inline.returned(10) == []
    assert inline.held() == [] and released == []
    # Set aside, then written by its run: the indexer lets it go.
    inline.claim("1-0")
    assert inline.for_indexer([entry]) == []
    inline.settle("1-0", embedded=True)
    assert released == ["1-0"] and inline.held() == [] and inline.returned(10) == []
    # Written before the indexer handles what it read earlier: dropped, once.
    inline.claim("1-0")
    inline.settle("1-0", embedded=True)
    assert inline.for_indexer([entry]) == []
    assert inline.for_indexer([entry]) == [entry]
    assert inline.returned(10) == []
    # Begun: the vector of the message's text; too long for a run, or nothing to embed: not.
    begun = inline.begin("an allergy")
    assert begun is not None
    vector = await inline.vector("3-0", 4, begun)
    assert vector is not None and (vector.entry, vector.seq) == ("3-0", 4)
    assert vector.vector == (await HashingEmbedder().embed(["an allergy"]))[0].tobytes()
    assert inline.begin("x" * 2001) is None and inline.begin("") is None


async def test_a_run_longer_than_the_lease_keeps_its_embedding_job(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """The indexer reads the job while the run is under way and keeps its lease: no
    maintenance puts it back in the queue for a second embedding, however long the run."""
    async with make_app(
        agents=[Partial()], embedder="hashing", audit=False, job_lease_seconds=0.6
    ) as c:
        reclaimed = _reclaimed(await c.get("/metrics"))  # the process's counter so far
        r = await post_message(
            c,
            "Allergic to penicillin since childhood",
            agent="partial",
            metadata={"sleep": 3},
            configuration={"blocking": False},
        )
        assert r.status_code == 200, r.text
        tid, cid = r.json()["task"]["id"], r.json()["task"]["contextId"]

        await until(partial(_in_state, c, tid, "completed"), what="the run to complete")
        assert await _indexed(c, cid, 1) == {"indexed": 1, "pending": 0}
        assert await redis.xlen(EMBEDS) == 0
        if not CLUSTER:  # a cluster's indexer did the job at once, before any lease ran out
            assert _reclaimed(await c.get("/metrics")) == reclaimed


def _reclaimed(metrics: httpx.Response) -> float:
    lines = metrics.text.splitlines()
    return sum(float(x.split()[-1]) for x in lines if x.startswith("gateway_jobs_reclaimed_total"))


@slow_process_test
async def test_a_run_killed_before_its_last_write_loses_no_embedding(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    """The embedding job stays queued until a vector is added: a process killed while its
    run holds the job leaves it for the next process's indexer."""
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
            if not CLUSTER:  # the run holds the job (a cluster's indexer may be done with it)
                assert (await _memory(c, cid))["pending"] == 1
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=PROCESS_SECONDS)
    with serving(tmp_path, **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:

            async def indexed() -> dict[str, int] | None:
                memory = await _memory(c, cid)
                return memory if memory["pending"] == 0 else None

            memory = await until(indexed, timeout=45, what="the job to be embedded", logs=tmp_path)
            assert memory == {"indexed": 1, "pending": 0}
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
