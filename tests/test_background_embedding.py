"""User messages are embedded in the background, never on a send's path: by the indexer of
the serving process (its background loop) or of ``gateway worker`` processes, in batches
that gather for ``GATEWAY_EMBEDDER_LINGER_MS``."""

from __future__ import annotations

import asyncio
import os
from functools import partial
from pathlib import Path

import httpx

from gateway.store.keys import EMBEDS, EMBEDS_GROUP
from tests.conftest import AppFactory, RawRedis, post_message, send_task
from tests.embeddings_server import EmbeddingsServer
from tests.processes import slow_process_test, working
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


async def test_messages_sent_together_are_embedded_in_one_batch(
    make_app: AppFactory, embeddings: EmbeddingsServer, redis: RawRedis
) -> None:
    """The indexer's first job waits the linger for the others: eight messages sent at once
    are embedded in one or two calls, not eight; every job is then acknowledged and gone."""
    settings = {
        "embedder": "openai",
        "embedder_url": embeddings.url,
        "embedder_model": embeddings.model,
        "embedder_api_key": "test-key",
        "embedder_linger_ms": 1000,
        "audit": False,
    }
    async with make_app(**settings) as c:
        cid = (await send_echo(c, "Allergic to penicillin since childhood"))["contextId"]
        await _indexed(c, cid, 1)
        first = len(embeddings.calls)
        texts = [f"Knee swollen after fall number {n}" for n in range(8)]
        sends = [
            post_message(c, text, agent="echo", contextId=cid, configuration={"blocking": False})
            for text in texts
        ]
        assert all(r.status_code == 200 for r in await asyncio.gather(*sends))
        await _indexed(c, cid, 9)
        calls = embeddings.calls[first:]
        assert sorted(t for call in calls for t in call["input"]) == sorted(texts)
        assert len(calls) <= 2, [len(call["input"]) for call in calls]
        assert await redis.xlen(EMBEDS) == 0
        assert (await redis.xpending(EMBEDS, EMBEDS_GROUP))["pending"] == 0


async def test_a_message_sent_without_waiting_is_embedded(make_app: AppFactory) -> None:
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
    """``GATEWAY_SERVE_EMBEDS=false``: the serving process runs no indexer; the messages
    wait queued, and a ``gateway worker`` embeds them."""
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
