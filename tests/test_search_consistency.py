"""Read-your-writes for context search: ``consistency=wait`` (the REST query parameter; the
MCP and agent tools' argument, tests/test_mcp.py and tests/test_openai_agent_memory.py)
first waits, up to ``GATEWAY_SEARCH_WAIT_SECONDS``, until the messages the context had
queued are embedded; ``eventual``, the default, searches what is embedded now."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any

import httpx
import pytest

from tests.conftest import AppFactory, post_message, send_task
from tests.embeddings_server import EmbeddingsServer, openai_settings
from tests.waiting import WAIT_SECONDS, stays, until

send_echo = partial(send_task, agent="echo")


def _openai(embeddings: EmbeddingsServer, **extra: Any) -> dict[str, Any]:
    return openai_settings(embeddings, **{"embedder_timeout_seconds": 600, **extra})


async def _search(
    c: httpx.AsyncClient, cid: str, query: str, consistency: str | None, mode: str = "vector"
) -> httpx.Response:
    params = {"consistency": consistency} if consistency is not None else {}
    body = {"query": query, "mode": mode}
    return await c.post(f"/v1/contexts/{cid}:search", json=body, params=params)


async def _texts(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [hit["text"] for hit in response.json()["hits"]]


async def _memory(c: httpx.AsyncClient, cid: str) -> dict[str, int]:
    memory: dict[str, int] = (await c.get(f"/v1/contexts/{cid}")).json()["memory"]
    return memory


@pytest.mark.parametrize("embedder", ["hashing", "wordllama"])
async def test_a_search_that_waits_finds_the_message_just_sent(
    make_app: AppFactory, embedder: str
) -> None:
    """Send, then search with consistency=wait: the messages are found by meaning, blocking
    send or not, however soon the background indexer gets to them."""
    async with make_app(embedder=embedder, audit=False) as c:
        cid = (await send_echo(c, "Allergic to penicillin since childhood"))["contextId"]
        r = await post_message(
            c,
            "Knee swollen after the fall",
            agent="echo",
            contextId=cid,
            configuration={"blocking": False},
        )
        assert r.status_code == 200, r.text
        found = await _texts(await _search(c, cid, "penicillin allergy", "wait"))
        assert found[0].startswith("Allergic")
        found = await _texts(await _search(c, cid, "swollen knee", "wait"))
        assert found[0] == "Knee swollen after the fall"
        assert await _memory(c, cid) == {"indexed": 2, "pending": 0}


async def test_a_waiting_search_waits_for_the_embedder(
    make_app: AppFactory, embeddings: EmbeddingsServer
) -> None:
    """The embedder holds its calls: the send returns with its message pending, a plain
    search answers at once without it, a waiting one answers once the vector is stored."""
    embeddings.hold()
    async with make_app(**_openai(embeddings, search_wait_seconds=60)) as c:
        cid = (await send_echo(c, "Sore throat and fever"))["contextId"]
        assert await _memory(c, cid) == {"indexed": 0, "pending": 1}
        assert await _texts(await _search(c, cid, "fever", None)) == []
        assert await _texts(await _search(c, cid, "fever", "eventual")) == []
        waiting = asyncio.create_task(_search(c, cid, "fever", "wait"))
        await until(lambda: embeddings.held == 1, what="the embedding to be held")
        await stays(lambda: not waiting.done(), 0.3, what="the search to wait")
        embeddings.release()
        async with asyncio.timeout(WAIT_SECONDS):
            assert await _texts(await waiting) == ["Sore throat and fever"]


async def test_a_waiting_search_answers_with_what_is_embedded_after_its_bound(
    make_app: AppFactory,
) -> None:
    """Nothing embeds here (the serving process leaves it to workers, and there are none):
    after GATEWAY_SEARCH_WAIT_SECONDS the search answers, by what it has (the words)."""
    bound = 0.5
    async with make_app(
        embedder="hashing", audit=False, serve_embeds=False, search_wait_seconds=bound
    ) as c:
        cid = (await send_echo(c, "Sore throat and fever"))["contextId"]
        started = time.monotonic()
        assert await _texts(await _search(c, cid, "fever", "wait")) == []
        assert time.monotonic() - started >= bound
        by_words = await _search(c, cid, "fever", "wait", mode="text")
        assert await _texts(by_words) == ["Sore throat and fever"]
        assert await _memory(c, cid) == {"indexed": 0, "pending": 1}


async def test_a_bad_consistency_is_400(make_app: AppFactory) -> None:
    async with make_app(embedder="hashing", audit=False) as c:
        cid = (await send_echo(c, "Sore throat and fever"))["contextId"]
        for value in ("strong", "WAIT", "", "wait,eventual"):
            r = await _search(c, cid, "fever", value)
            assert r.status_code == 400, (value, r.text)
            body = r.json()
            assert body["error"] == "InvalidParamsError", body
            assert body["data"]["errors"] == [
                {"field": "consistency", "reason": "must be one of eventual, wait"}
            ], body
        assert (await _search(c, "unknown-context", "fever", "wait")).status_code == 404
