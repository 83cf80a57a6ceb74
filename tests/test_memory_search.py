"""Context memory's indexing and search: background embedding, skip rules, ranking by
meaning, words or both, scrub, isolation per user, bad bodies, and memory off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.agents.base import AgentRequest, AgentUpdate, ReplyUpdate, StatusUpdate
from tests.agents import TestAgent
from tests.conftest import AppFactory, RawRedis, auth, send_task
from tests.memory_contexts import _indexed, _indexed_context, _search, send_echo


class Replier(TestAgent):
    """Answers with words of its own, so agent text can be told from user text."""

    id = "replier"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        yield ReplyUpdate([{"kind": "text", "text": "zebra xylophone quartz"}])
        yield StatusUpdate("completed")


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
