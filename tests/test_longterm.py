"""Long-term memory through Cortadel, against a stand-in that validates every request
against Cortadel's published contract: recall options, injection, dedupe, fail-open and
strict recall, the durable outbox, the ledger and scrub, the one-key probe, health."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from functools import partial
from typing import Any, ClassVar

import httpx
import orjson
import pytest
from pydantic import ValidationError

from gateway.agents.base import (
    AgentRequest,
    AgentUpdate,
    ArtifactUpdate,
    ReplyUpdate,
    StatusUpdate,
)
from gateway.longterm.render import cortadel_user_id, strip_block
from gateway.options.longterm import CortadelSettings, MemoryOptions
from gateway.principal import Principal
from gateway.store.keys import OUTBOX as OUTBOX_STREAM
from gateway.store.keys import OUTBOX_GROUP, UserKeys
from gateway.store.longterm_store import LongTermStore
from tests.agents import TestAgent
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, outbox_settled, send_task
from tests.cortadel_server import CortadelServer
from tests.waiting import stays, until

SEARCH = "/api/v1/memories/search"
STORE = "/api/v1/memories/from-conversation"
MEMORIES = "/api/v1/memories"
ALICE = cortadel_user_id("t1", "alice")


class Reveal(TestAgent):
    """Shows what recall handed it, and replies with the block it was given (an agent that
    leaks its prompt), so the tests can see the block never goes back to Cortadel."""

    id = "reveal"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        memory = request.memory
        seen = {
            "lines": list(request.recalled),
            "block": memory.block if memory else None,
            "injectAs": memory.inject_as if memory else None,
        }
        yield ArtifactUpdate([{"kind": "data", "data": seen}], name="recall")
        leaked = f"{memory.block}\n" if memory else ""
        yield ReplyUpdate([{"kind": "text", "text": f"{leaked}Noted, thank you."}])
        yield StatusUpdate("completed")


class Overridden(Reveal):
    """An agent whose own configuration overrides the deployment's memory options."""

    id = "overridden"
    memory_options: ClassVar[dict[str, Any]] = {
        "topK": 2,
        "searchMode": "vector",
        "injectAs": "instructions",
    }


class Persisting(Reveal):
    """An agent whose blocking sends wait for their turn to be stored."""

    id = "persisting"
    memory_options: ClassVar[dict[str, Any]] = {"awaitPersist": True}


@pytest.fixture
def cortadel() -> Iterator[CortadelServer]:
    server = CortadelServer().start()
    yield server
    server.stop()


Gateway = Callable[..., Any]


@pytest.fixture
def gateway(make_app: AppFactory, cortadel: CortadelServer) -> Gateway:
    """A keyed gateway wired to the stand-in; keyword arguments are Cortadel settings. Its
    contexts without a subject recall user-wide (``subjectless_recall="user"``), so the
    tests of recall's mechanics need no subject; the tests of scoping set it back."""

    def build(**options: Any) -> Any:
        values: dict[str, Any] = {
            "url": cortadel.url,
            "api_key": "cortadel-key",
            "backoff_max_seconds": 0.3,
            "timeout_seconds": 2.0,
            "subjectless_recall": "user",
        }
        values.update(options)
        return make_app(
            agents=[Reveal(), Overridden(), Persisting()],
            api_keys=orjson.dumps(API_KEYS).decode(),
            cortadel=CortadelSettings(**values),
            job_lease_seconds=2.0,
        )

    return build


# Sends go to the reveal agent as alice unless a test says otherwise.
send_reveal = partial(send_task, agent="reveal", headers=auth("alice"))


def _seen(task: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = task["artifacts"][0]["parts"][0]["data"]
    return data


async def _probed(c: httpx.AsyncClient) -> None:
    """Wait until the gateway's start-up key probe has run."""

    async def ready() -> bool:
        return bool((await c.get("/readyz")).json()["checks"]["cortadel"] != "degraded")

    await until(ready, what="the start-up key probe")


async def _retries(c: httpx.AsyncClient) -> float:
    """The outbox's retry count so far (a process-wide counter)."""
    for line in (await c.get("/metrics")).text.splitlines():
        if line.startswith("gateway_ltm_retries_total "):
            return float(line.split()[1])
    return 0.0


# -- configuration ------------------------------------------------------------------------


def test_options_are_validated_and_agents_override_them() -> None:
    with pytest.raises(ValidationError):
        CortadelSettings(top_k=51)
    with pytest.raises(ValidationError):
        CortadelSettings(search_mode="fuzzy")
    with pytest.raises(ValidationError, match="USER_ID_SECRET"):
        CortadelSettings(user_ids="hashed")
    with pytest.raises(ValidationError):
        MemoryOptions().overridden({"topK": 0})
    with pytest.raises(ValidationError):
        MemoryOptions().overridden({"unknownOption": 1})
    defaults = CortadelSettings(url="http://x", tags="a, b").options()
    assert defaults.top_k == 5 and defaults.search_mode == "hybrid" and defaults.rerank is None
    assert defaults.tags == ["a", "b"] and defaults.inject_as == "message"
    assert defaults.recall_timeout_ms == 1500 and not defaults.strict
    mine = defaults.overridden({"topK": 9, "injectAs": "instructions"})
    assert (mine.top_k, mine.inject_as, mine.tags) == (9, "instructions", ["a", "b"])


def test_user_ids_never_collide_across_tenants() -> None:
    assert cortadel_user_id("t1", "alice") != cortadel_user_id("t2", "alice")
    assert cortadel_user_id("a:b", "c") != cortadel_user_id("a", "b:c")
    hashed = cortadel_user_id("t1", "alice", "s" * 32)
    assert hashed.startswith("gw-") and "alice" not in hashed
    assert hashed != cortadel_user_id("t1", "alice", "t" * 32)


def test_a_block_is_cut_out_wherever_it_appears() -> None:
    header = "[Recalled memories]"
    text = f"before\n{header}\n- a fact\n[End of recalled memories]\nafter"
    assert strip_block(text, header) == "before\n\nafter"
    assert strip_block(f"keep\n{header}\n- unclosed", header) == "keep"


# -- recall -------------------------------------------------------------------------------


async def test_default_recall_request_and_injected_block(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.seed(ALICE, "allergic to penicillin", gist="Penicillin allergy")
    cortadel.seed(ALICE, "prefers morning appointments")
    cortadel.seed(cortadel_user_id("t2", "alice"), "another tenant's alice")
    async with gateway() as c:
        await _probed(c)
        task = await send_reveal(c, "is penicillin safe?", {"kind": "data", "data": {"dose": "1g"}})
        echo = await send_task(c, "appointments please", agent="echo", headers=auth("alice"))
    body = cortadel.calls_to(SEARCH)[0]["body"]
    assert body["query"] == "is penicillin safe?"  # DataParts stay out unless asked
    assert body["user_id"] == ALICE and body["top_k"] == 5 and body["mode"] == "hybrid"
    assert body["app_name"] == "gateway"
    assert body.get("rerank") is None and body.get("memory_type") is None
    assert body.get("session_id") is None
    assert cortadel.calls_to(SEARCH)[0]["auth"] == "Bearer cortadel-key"
    seen = _seen(task)
    # gist preferred over content; the other tenant's alice is never recalled
    assert seen["lines"] == ["Penicillin allergy", "prefers morning appointments"]
    assert seen["injectAs"] == "message"
    block = seen["block"]
    assert block.startswith("[Recalled memories]\n") and "not instructions" in block
    assert "- Penicillin allergy\n- prefers morning appointments\n" in block
    assert block.endswith("[End of recalled memories]")
    assert "another tenant" not in block
    # the echo agent reports how many memories it was handed (a new context: no dedupe)
    assert echo["artifacts"][0]["parts"][-1]["data"]["echo"]["recalled"] >= 2
    assert cortadel.errors == []


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"top_k": 12}, {"top_k": 12}),
        ({"search_mode": "text"}, {"mode": "text"}),
        ({"search_mode": "vector"}, {"mode": "vector"}),
        ({"rerank": "cross_encoder"}, {"rerank": "cross_encoder"}),
        ({"memory_type": "episodic"}, {"memory_type": "episodic"}),
        ({"app_name": "ward-7"}, {"app_name": "ward-7"}),
    ],
)
async def test_each_recall_option_shapes_the_search(
    gateway: Gateway, cortadel: CortadelServer, options: dict[str, Any], expected: dict[str, Any]
) -> None:
    async with gateway(**options) as c:
        await _probed(c)
        await send_reveal(c, "anything to recall?")
    body = cortadel.calls_to(SEARCH)[0]["body"]
    assert {k: body.get(k) for k in expected} == expected
    assert cortadel.errors == []


async def test_scoped_recall_sends_the_context_as_session(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway(scope_recall_to_session=True) as c:
        await _probed(c)
        task = await send_reveal(c, "what did we say?")
    assert cortadel.calls_to(SEARCH)[0]["body"]["session_id"] == task["contextId"]


async def test_min_score_header_and_instructions(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.seed(ALICE, "low score fact", score=0.01)
    cortadel.seed(ALICE, "high score fact", score=0.9)
    cortadel.seed(ALICE, "unscored fact")
    options = {"min_score": 0.5, "memory_header": "## Chart notes", "inject_as": "instructions"}
    async with gateway(**options) as c:
        await _probed(c)
        seen = _seen(await send_reveal(c, "fact check"))
    assert sorted(seen["lines"]) == ["high score fact", "unscored fact"]
    assert seen["block"].startswith("## Chart notes\n")
    assert seen["injectAs"] == "instructions"


async def test_an_agent_overrides_the_deployment_options(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        await _probed(c)
        seen = _seen(await send_task(c, "hello there", agent="overridden", headers=auth("alice")))
    body = cortadel.calls_to(SEARCH)[0]["body"]
    assert (body["top_k"], body["mode"]) == (2, "vector")
    assert seen["injectAs"] is None  # nothing recalled, nothing injected


async def test_dedupe_across_turns_and_its_cap(gateway: Gateway, cortadel: CortadelServer) -> None:
    cortadel.seed(ALICE, "takes metformin daily")
    async with gateway(store_turns=False) as c:
        await _probed(c)
        first = await send_reveal(c, "metformin dose?")
        again = await send_reveal(c, "metformin dose again?", contextId=first["contextId"])
        elsewhere = await send_reveal(c, "metformin in a new visit?")
    assert _seen(first)["lines"] == ["takes metformin daily"]
    assert _seen(again)["lines"] == []  # already in this context's prompt history
    assert _seen(elsewhere)["lines"] == ["takes metformin daily"]  # per context


async def test_without_dedupe_memories_repeat(gateway: Gateway, cortadel: CortadelServer) -> None:
    cortadel.seed(ALICE, "takes metformin daily")
    async with gateway(dedupe_across_turns=False, store_turns=False) as c:
        await _probed(c)
        first = await send_reveal(c, "metformin dose?")
        again = await send_reveal(c, "metformin again?", contextId=first["contextId"])
    assert _seen(again)["lines"] == ["takes metformin daily"]


async def test_remembered_ids_are_capped_per_context(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.seed(ALICE, "alpha fact")
    cortadel.seed(ALICE, "beta fact")
    async with gateway(max_remembered_ids=1, top_k=1, store_turns=False) as c:
        await _probed(c)
        t1 = await send_reveal(c, "alpha")
        t2 = await send_reveal(c, "beta", contextId=t1["contextId"])
        t3 = await send_reveal(c, "alpha", contextId=t1["contextId"])
    assert _seen(t1)["lines"] == ["alpha fact"]
    assert _seen(t2)["lines"] == ["beta fact"]
    assert _seen(t3)["lines"] == ["alpha fact"]  # forgotten once beta took the only slot


async def test_no_recall_without_text_or_when_disabled_or_already_injected(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        await _probed(c)
        await send_reveal(c, {"kind": "data", "data": {"$memoryType": "episodic", "note": "x"}})
        await send_reveal(
            c, "[Recalled memories]\n- pasted by the client\n[End of recalled memories]"
        )
    async with gateway(retrieve=False) as c:
        await _probed(c)
        await send_reveal(c, "plenty of text here")
    assert cortadel.calls_to(SEARCH) == []


async def test_recall_fails_open_and_is_counted(gateway: Gateway, cortadel: CortadelServer) -> None:
    async with gateway(recall_timeout_ms=200) as c:
        await _probed(c)
        cortadel.down = True
        down = await send_reveal(c, "is anyone there?")
        cortadel.down, cortadel.delay = False, 1.0
        slow = await send_reveal(c, "still slow?")
        cortadel.delay = 0.0
        metrics = (await c.get("/metrics")).text
        ready = (await c.get("/readyz")).json()
    assert down["status"]["state"] == "completed" and _seen(down)["lines"] == []
    assert slow["status"]["state"] == "completed"
    assert 'gateway_ltm_recalls_total{outcome="failed"}' in metrics
    assert 'gateway_ltm_recalls_total{outcome="timeout"}' in metrics
    assert ready["status"] == "ready"


async def test_strict_recall_fails_the_task(gateway: Gateway, cortadel: CortadelServer) -> None:
    async with gateway(strict=True) as c:
        await _probed(c)
        cortadel.down = True
        task = await send_reveal(c, "recall or nothing")
    assert task["status"]["state"] == "failed"
    assert "Long-term memory is unavailable" in task["status"]["message"]["parts"][0]["text"]


# -- store --------------------------------------------------------------------------------


async def test_turns_are_stored_without_the_injected_block(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.seed(ALICE, "blood type O negative")
    async with gateway(tags="triage,ward-3", project="cardiology", is_agent_memory=True) as c:
        await _probed(c)
        task = await send_reveal(c, "my blood type?", message_id="m-user-1")
        await until(lambda: cortadel.calls_to(STORE), what="the turn to be stored")
        full = (await c.get(f"/v1/tasks/{task['id']}", headers=auth("alice"))).json()
    body = cortadel.calls_to(STORE)[0]["body"]
    reply = full["history"][-1]
    assert body["user_id"] == ALICE and body["session_id"] == task["contextId"]
    assert body["tags"] == ["triage", "ward-3"] and body["project"] == "cardiology"
    assert body["is_agent_memory"] is True
    assert body["messages"] == [
        {"role": "user", "content": "my blood type?", "uuid": "m-user-1"},
        {"role": "assistant", "content": "Noted, thank you.", "uuid": reply["messageId"]},
    ]
    assert "[Recalled memories]" in reply["parts"][0]["text"]  # the agent did leak it
    assert cortadel.errors == []


async def test_store_turns_off_stores_nothing(
    gateway: Gateway, cortadel: CortadelServer, redis: RawRedis
) -> None:
    async with gateway(store_turns=False) as c:
        await _probed(c)
        await send_reveal(c, "do not keep this")
        await until(lambda: outbox_settled(redis), what="the outbox to settle")
    assert cortadel.calls_to(STORE) == []


async def test_an_outage_loses_no_turn_and_repeats_none(
    gateway: Gateway, cortadel: CortadelServer, redis: RawRedis
) -> None:
    turns = 6
    async with gateway() as c:
        await _probed(c)
        retried = await _retries(c)
        cortadel.down = True
        sent = [
            await send_reveal(c, f"turn number {n}", message_id=f"turn-{n}") for n in range(turns)
        ]
        assert all(t["status"]["state"] == "completed" for t in sent)

        async def retrying() -> bool:
            return await _retries(c) > retried

        await until(retrying, what="the outbox to retry against the outage")
        await c.app.state.runtime.maintenance.publish_figures()
        during = (await c.get("/metrics")).text
        cortadel.down = False

        def arrived() -> bool:
            return {m.uuid for m in cortadel.of_user(ALICE)} >= {f"turn-{n}" for n in range(turns)}

        await until(arrived, what="every turn to arrive after the outage")
        # A job leaves the outbox after Cortadel has answered for it, so arrival comes first.
        await until(lambda: outbox_settled(redis), what="the outbox to settle")
        await c.app.state.runtime.maintenance.publish_figures()
        after = (await c.get("/metrics")).text
    stored = [m.uuid for m in cortadel.of_user(ALICE) if m.uuid and m.uuid.startswith("turn-")]
    assert sorted(stored) == sorted(f"turn-{n}" for n in range(turns))  # each exactly once
    assert f"gateway_ltm_outbox_depth {float(turns)}" in during
    assert "gateway_ltm_outbox_depth 0.0" in after
    assert "gateway_ltm_retries_total" in during
    assert cortadel.errors == []


# -- ledger and scrub ---------------------------------------------------------------------


async def _stored(
    c: httpx.AsyncClient, cortadel: CortadelServer, text: str, **fields: Any
) -> dict[str, Any]:
    """A turn of ``text`` (``fields`` go into its message), once Cortadel holds it."""
    task = await send_reveal(c, text, **fields)
    try:
        await until(
            lambda: any(m.text == text for m in cortadel.of_user(ALICE)), what=f"{text!r} stored"
        )
    except AssertionError as exc:
        held = [m.text for m in cortadel.of_user(ALICE)]
        calls = len(cortadel.calls_to(STORE))
        raise AssertionError(f"{exc}; Cortadel holds {held!r} after {calls} store calls") from None
    return task


async def _scrub(c: httpx.AsyncClient, context_id: str) -> httpx.Response:
    """Delete one of alice's contexts (which scrubs its memories unless scrub is off)."""
    r = await c.delete(f"/v1/contexts/{context_id}", headers=auth("alice"))
    assert r.status_code == 204
    return r


async def _storing(c: httpx.AsyncClient, cortadel: CortadelServer, text: str) -> dict[str, Any]:
    """A turn of ``text`` whose store Cortadel is still answering (0.6 s late) on return."""
    await _probed(c)
    cortadel.delay = 0.6
    task = await send_reveal(c, text)
    await until(lambda: cortadel.calls_to(STORE), what="the store to be in flight")
    return task


async def test_scrub_deletes_exactly_the_ledger(gateway: Gateway, cortadel: CortadelServer) -> None:
    unrelated = cortadel.seed(ALICE, "written by another application")
    async with gateway() as c:
        await _probed(c)
        gone = await _stored(c, cortadel, "forget this visit")
        kept = await _stored(c, cortadel, "keep this visit")
        ledger = await LongTermStore(c.app.state.runtime.store).ledger(
            Principal("t1", "alice"), gone["contextId"]
        )
        await _scrub(c, gone["contextId"])
        await until(lambda: _deletes(cortadel), what="the scrub's delete")
    deleted = _deletes(cortadel)
    assert deleted == [sorted(ledger)] and len(ledger) == 2  # the user's turn and the reply
    left = {m.text for m in cortadel.of_user(ALICE)}
    assert "forget this visit" not in left
    assert {"keep this visit", "written by another application"} <= left
    assert unrelated in cortadel.memories
    assert kept["contextId"] != gone["contextId"]


def _deletes(cortadel: CortadelServer, user_id: str = ALICE) -> list[list[str]]:
    return [
        sorted(c["body"]["memory_ids"])
        for c in cortadel.calls_to(MEMORIES)
        if c["method"] == "DELETE" and c["body"]["user_id"] == user_id
    ]


async def test_the_scrub_receipt_and_its_cortadel_follow_up(
    gateway: Gateway, cortadel: CortadelServer, redis: RawRedis
) -> None:
    async with gateway() as c:
        await _probed(c)
        first = await _stored(c, cortadel, "forget this visit")
        cid = first["contextId"]
        # On a Redis Cluster the turn's outbox job is added after the send answers (see
        # outbox_settled): the outbox can read empty before it, so wait for the turn itself.
        await _stored(c, cortadel, "and this one", contextId=cid)
        keys = UserKeys.of("t1", "alice").context(cid)
        runtime = c.app.state.runtime

        async def embedded() -> bool:  # both user messages have their vector
            return bool(await runtime.client.strlen(keys.vector_seqs) == 8)

        await until(embedded, what="both user messages embedded")
        # Cortadel's answer is written to the ledger before the job is acknowledged.
        await until(lambda: outbox_settled(redis), what="both turns' ledger entries written")
        ledger = await LongTermStore(runtime.store).ledger(Principal("t1", "alice"), cid)
        scrub_id = (await _scrub(c, cid)).headers["x-request-id"]
        await until(lambda: _deletes(cortadel), what="the scrub's delete")

        async def follow_up() -> list[dict[str, Any]]:
            page = await c.get("/audit", params={"context": cid}, headers=auth("admin"))
            items: list[dict[str, Any]] = page.json()["items"]
            return [e for e in items if e["operation"] == "forget_memories"]

        (forgotten,) = await until(follow_up, what="the deletion's audit entry")

        async def scrubs() -> list[dict[str, Any]]:
            params = {"operation": "delete_context"}
            page = await c.get("/audit", params=params, headers=auth("admin"))
            items: list[dict[str, Any]] = page.json()["items"]
            return items

        (scrub,) = await until(scrubs, what="the scrub's audit entry")
    assert scrub["requestId"] == scrub_id and scrub["contextId"] == cid
    assert scrub["removed"] == {
        "messages": 4,  # two user messages and two replies
        "tasks": 2,
        "vectors": 2,
        "pendingJobs": 0,
        "deadLetters": 0,
        "memoriesQueued": len(ledger),
    }
    deleted = [i for call in _deletes(cortadel) for i in call]
    assert forgotten["scrubOf"] == scrub_id and forgotten["user"] == "alice"
    assert forgotten["removed"] == {"memories": len(deleted)} and sorted(deleted) == sorted(ledger)


async def test_scrub_off_keeps_memories(
    gateway: Gateway, cortadel: CortadelServer, redis: RawRedis
) -> None:
    async with gateway(scrub=False) as c:
        await _probed(c)
        task = await _stored(c, cortadel, "outlive the context")
        await _scrub(c, task["contextId"])
        await until(lambda: outbox_settled(redis), what="the outbox to settle")
    assert _deletes(cortadel) == []
    assert any(m.text == "outlive the context" for m in cortadel.of_user(ALICE))


async def test_a_pending_store_of_a_scrubbed_context_is_dropped(
    gateway: Gateway, cortadel: CortadelServer, redis: RawRedis
) -> None:
    async with gateway() as c:
        await _probed(c)
        cortadel.down = True
        task = await send_reveal(c, "scrub me before delivery")
        # the store is attempted (and refused) before the scrub, so it is pending during it
        await until(lambda: cortadel.calls_to(STORE), what="a store attempt")
        await _scrub(c, task["contextId"])
        cortadel.down = False

        await until(lambda: outbox_settled(redis), what="the outbox to drain")
    assert cortadel.of_user(ALICE) == []


async def test_a_store_landing_after_the_scrub_is_deleted_too(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        task = await _storing(c, cortadel, "racing the scrub")
        await _scrub(c, task["contextId"])
        await until(lambda: _deletes(cortadel), what="the scrub's delete")
        cortadel.delay = 0.0
        await until(lambda: cortadel.of_user(ALICE) == [], what="the late store to be deleted")


async def test_scrub_off_keeps_a_store_landing_after_the_scrub(
    gateway: Gateway, cortadel: CortadelServer, redis: RawRedis
) -> None:
    async with gateway(scrub=False) as c:
        task = await _storing(c, cortadel, "outlive the context too")
        await _scrub(c, task["contextId"])
        cortadel.delay = 0.0
        await until(lambda: outbox_settled(redis), what="the outbox to settle")
    assert _deletes(cortadel) == []
    assert any(m.text == "outlive the context too" for m in cortadel.of_user(ALICE))


# -- identity and health ------------------------------------------------------------------


async def test_a_key_bound_to_one_user_is_refused(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.pin_key_to = "service-account"
    async with gateway() as c:
        # the probe writes as one user and reads as another: refused, so the key is bound
        await until(
            lambda: c.app.state.runtime.cortadel.key_states()["refused"],
            what="the probe to refuse the key",
        )
        ready = (await c.get("/readyz")).json()
        task = await send_reveal(c, "does anyone remember me?")

        def untouched() -> bool:
            return not cortadel.calls_to(SEARCH) and not cortadel.calls_to(STORE)

        # nothing goes through a refused key: a window for a stray call to show
        await stays(untouched, 0.5, what="no search or store through the refused key")
    assert ready["status"] == "degraded" and ready["checks"]["cortadel"] == "degraded"
    assert task["status"]["state"] == "completed"
    assert cortadel.calls_to(SEARCH) == [] and cortadel.calls_to(STORE) == []
    assert [m.text for m in cortadel.memories.values()] == []  # the probe cleaned up


async def test_the_probe_passes_for_a_per_user_key_and_cleans_up(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        await _probed(c)
        ready = (await c.get("/readyz")).json()
    assert ready == {
        "status": "ready",
        "checks": {"redis": "ok", "cortadel": "ok"},
        "critical": ["redis"],
    }
    assert cortadel.memories == {}


async def test_per_tenant_keys_and_hashed_user_ids(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.api_key = None  # accept any key; record which one came
    secret = "a-long-enough-secret-value"
    async with gateway(
        tenant_keys='{"t2": "tenant-two-key"}', user_ids="hashed", user_id_secret=secret
    ) as c:
        await _probed(c)
        await send_reveal(c, "tenant one speaking")
        await send_reveal(c, "tenant two speaking", headers=auth("carol"))
    one, two = cortadel.calls_to(SEARCH)
    assert one["auth"] == "Bearer cortadel-key" and two["auth"] == "Bearer tenant-two-key"
    assert one["body"]["user_id"] == cortadel_user_id("t1", "alice", secret)
    assert two["body"]["user_id"] == cortadel_user_id("t2", "alice", secret)
    assert one["body"]["user_id"] != two["body"]["user_id"]


async def test_readyz_reports_cortadel_as_non_critical(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        await _probed(c)
        cortadel.down = True
        r = await c.get("/readyz")
    assert r.status_code == 200
    assert r.json()["status"] == "degraded" and r.json()["checks"]["cortadel"] == "degraded"
    cortadel.stop()
    async with gateway(probe=False) as c:
        r = await c.get("/readyz")
    assert r.status_code == 200 and r.json()["checks"]["cortadel"] == "unreachable"


async def test_a_stalled_outbox_job_is_reclaimed_whole(
    gateway: Gateway, cortadel: CortadelServer, redis: Any
) -> None:
    """A worker that died holding a job: maintenance requeues it with all its fields (a
    'forget' job keeps its ids) and another worker finishes it."""
    doomed = cortadel.seed(ALICE, "to be deleted")
    async with gateway() as c:
        await _probed(c)
        job = orjson.dumps({"t": "t1", "u": "alice", "c": "gone-context"})
        # a consumer that never finishes takes it, in the same step as it is queued
        taken = await redis.eval(
            "redis.call('XADD', KEYS[1], '*', 'job', ARGV[1], 'forget', ARGV[2]) "
            "return redis.call('XREADGROUP', 'GROUP', ARGV[3], 'ghost', 'COUNT', 1,"
            " 'STREAMS', KEYS[1], '>')",
            1,
            OUTBOX_STREAM,
            job,
            doomed,
            OUTBOX_GROUP,
        )
        assert taken
        await until(lambda: doomed not in cortadel.memories, what="the reclaimed job's delete")


# -- subjects: recall per (tenant, user, subject) -------------------------------------------

HIV = "Patient is HIV positive on dolutegravir"


def _uid(subject: str | None = None) -> str:
    return cortadel_user_id("t1", "alice", None, subject)


async def _held(cortadel: CortadelServer, user_id: str, text: str) -> None:
    await until(
        lambda: any(m.text == text for m in cortadel.of_user(user_id)), what=f"{text!r} stored"
    )


async def test_two_patients_under_one_key_never_share_memories(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    one, two = {"subject": "Patient/1"}, {"subject": "Patient/2"}
    async with gateway(subjectless_recall="context") as c:
        await _probed(c)
        first = await send_reveal(c, HIV, metadata=one)
        await _held(cortadel, _uid("Patient/1"), HIV)
        searched = len(cortadel.calls_to(SEARCH))
        other = await send_reveal(c, "Is the patient HIV positive on dolutegravir?", metadata=two)
        later = await send_reveal(c, "any HIV medication?", contextId=other["contextId"])
        same = await send_reveal(c, "HIV status of this patient?", metadata=one)
    assert first["contextId"] != same["contextId"]
    assert _seen(other)["lines"] == []
    assert HIV not in _seen(later)["lines"]  # at most patient 2's own turn, once stored
    for_two = cortadel.calls_to(SEARCH)[searched : searched + 2]
    assert [call["body"]["user_id"] for call in for_two] == [_uid("Patient/2")] * 2
    assert all(call["body"].get("session_id") is None for call in for_two)
    # no search ever went out with patient 1's id for patient 2's context, nor the login's
    ids = [call["body"]["user_id"] for call in cortadel.calls_to(SEARCH)]
    assert ids == [_uid("Patient/1"), _uid("Patient/2"), _uid("Patient/2"), _uid("Patient/1")]
    # one subject across two contexts: recalled
    assert HIV in _seen(same)["lines"]
    assert cortadel.of_user(ALICE) == [] and cortadel.errors == []


async def test_without_a_subject_a_context_recalls_only_its_own(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.seed(ALICE, "HIV status from another application")
    async with gateway(subjectless_recall="context") as c:
        await _probed(c)
        own = await send_reveal(c, HIV)
        await _held(cortadel, ALICE, HIV)
        again = await send_reveal(c, "HIV medication again?", contextId=own["contextId"])
        fresh = await send_reveal(c, "HIV medication, a new context?")
    assert _seen(fresh)["lines"] == []
    assert HIV in _seen(again)["lines"]
    assert "HIV status from another application" not in _seen(again)["lines"]
    bodies = [call["body"] for call in cortadel.calls_to(SEARCH)]
    assert [b["user_id"] for b in bodies] == [ALICE] * 3
    contexts = [own["contextId"], own["contextId"], fresh["contextId"]]
    assert [b["session_id"] for b in bodies] == contexts


async def test_subjectless_recall_user_recalls_across_contexts(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway(subjectless_recall="user") as c:
        await _probed(c)
        await send_reveal(c, HIV)
        await _held(cortadel, ALICE, HIV)
        fresh = await send_reveal(c, "HIV medication, a new context?")
    assert HIV in _seen(fresh)["lines"]
    assert cortadel.calls_to(SEARCH)[-1]["body"].get("session_id") is None


def test_subject_user_ids_never_collide() -> None:
    assert _uid("Patient/1") != _uid("Patient/2") != _uid()
    assert cortadel_user_id("t1", "alice:x") != _uid("x")
    assert cortadel_user_id("t1", "a", None, "b:c") != cortadel_user_id("t1", "a:b", None, "c")
    hashed = cortadel_user_id("t1", "alice", "s" * 32, "Patient/1")
    assert hashed.startswith("gw-") and "Patient" not in hashed
    assert hashed != cortadel_user_id("t1", "alice", "s" * 32)


MRN = {"kind": "data", "data": {"mrn": "MRN-778899", "vitals": {"hr": 72}}}


def _mentioning(cortadel: CortadelServer, value: str) -> list[dict[str, Any]]:
    return [c for c in cortadel.calls if value in orjson.dumps(c).decode()]


async def test_data_parts_never_reach_cortadel_unless_asked(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        await _probed(c)
        task = await send_reveal(c, "admission note", MRN, metadata={"subject": "Patient/1"})
        await _held(cortadel, _uid("Patient/1"), "admission note")
        await _scrub(c, task["contextId"])
        await until(lambda: _deletes(cortadel, _uid("Patient/1")), what="the scrub's delete")
    assert cortadel.calls_to(SEARCH) and cortadel.calls_to(STORE)
    assert _mentioning(cortadel, "MRN-778899") == [] and _mentioning(cortadel, "hr: 72") == []


async def test_include_data_sends_data_parts(gateway: Gateway, cortadel: CortadelServer) -> None:
    async with gateway(include_data=True) as c:
        await _probed(c)
        await send_reveal(c, "admission note", MRN)
        await until(lambda: cortadel.calls_to(STORE), what="the turn to be stored")
    assert cortadel.calls_to(SEARCH)[0]["body"]["query"] == (
        "admission note\nmrn: MRN-778899\nvitals.hr: 72"
    )
    assert "mrn: MRN-778899" in cortadel.calls_to(STORE)[0]["body"]["messages"][0]["content"]


# -- erasure and access without the context -------------------------------------------------


async def test_erasure_outlives_the_context_and_its_receipt_holds_no_content(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    p1, p2 = _uid("Patient/1"), _uid("Patient/2")
    older = cortadel.seed(p1, "Patient was HIV negative in 2019", superseded=True)
    other = cortadel.seed(p2, "Patient 2 takes metformin")
    mine = cortadel.seed(ALICE, "alice prefers mornings")
    bobs = cortadel.seed(cortadel_user_id("t1", "bob", None, "Patient/1"), "bob's patient")
    async with gateway(scrub=False) as c:
        await _probed(c)
        task = await send_reveal(c, HIV, metadata={"subject": "Patient/1"})
        await _held(cortadel, p1, HIV)
        await _scrub(c, task["contextId"])  # the context's keys are gone; its memories stay
        listed = await c.get("/v1/memories", params={"subject": "Patient/1"}, headers=auth("alice"))
        held = {m.id for m in cortadel.of_user(p1)}
        erased = await c.delete(
            "/v1/memories", params={"subject": "Patient/1"}, headers=auth("alice")
        )
        refused = await c.get(
            "/v1/memories", params={"subject": "Patient/1", "user": "alice"}, headers=auth("bob")
        )
        for_alice = await c.get(
            "/v1/memories", params={"subject": "Patient/2", "user": "alice"}, headers=auth("admin")
        )

        async def entries() -> list[dict[str, Any]]:
            page = await c.get(
                "/audit", params={"operation": "erase_memories"}, headers=auth("admin")
            )
            items: list[dict[str, Any]] = page.json()["items"]
            return items

        (entry,) = await until(entries, what="the erasure's audit entry")

        async def acted() -> list[dict[str, Any]]:
            page = await c.get(
                "/audit", params={"operation": "list_memories"}, headers=auth("admin")
            )
            items = page.json()["items"]
            return [e for e in items if e.get("forUser") == "alice" and e["user"] == "root"]

        (read_for_alice,) = await until(acted, what="the admin's read, for alice")
        trail = (await c.get("/audit", headers=auth("admin"))).text
    assert listed.status_code == 200
    assert {m["id"] for m in listed.json()["items"]} == held and older in held
    assert {m["text"] for m in listed.json()["items"]} >= {HIV}
    assert [m["current"] for m in listed.json()["items"] if m["id"] == older] == [False]
    assert erased.status_code == 200 and erased.json() == {"removed": {"memories": len(held)}}
    assert cortadel.of_user(p1) == []
    assert {other, mine, bobs} <= set(cortadel.memories)  # other subjects and users: kept
    assert refused.status_code == 403
    assert [m["id"] for m in for_alice.json()["items"]] == [other]
    assert entry["removed"] == {"memories": len(held)} and entry["user"] == "alice"
    assert read_for_alice["user"] == "root"
    assert "HIV" not in trail and "Patient" not in trail and "metformin" not in trail
    lists = [call for call in cortadel.calls_to(MEMORIES) if call["method"] == "GET"]
    assert all(call["query"]["include_superseded"] == "true" for call in lists)
    assert cortadel.errors == []


async def test_erasure_without_a_subject_takes_only_subjectless_memories(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    mine = cortadel.seed(ALICE, "alice prefers mornings")
    kept = cortadel.seed(_uid("Patient/1"), "a patient's fact")
    async with gateway() as c:
        await _probed(c)
        erased = await c.delete("/v1/memories", headers=auth("alice"))
        bad = await c.delete("/v1/memories", params={"subject": "x" * 201}, headers=auth("alice"))
        cortadel.down = True
        down = await c.delete("/v1/memories", headers=auth("alice"))
    assert erased.json() == {"removed": {"memories": 1}}
    assert mine not in cortadel.memories and kept in cortadel.memories
    assert bad.status_code == 400 and bad.json()["error"] == "InvalidParamsError"
    assert down.status_code == 503


async def test_a_scrub_removes_what_cortadel_derived_from_the_context(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    p1 = _uid("Patient/1")
    derived = "Derived: patient is on antiretroviral therapy"
    subject = {"subject": "Patient/1"}
    async with gateway() as c:
        await _probed(c)
        kept = await send_reveal(c, "Patient reports a penicillin allergy", metadata=subject)
        await _held(cortadel, p1, "Patient reports a penicillin allergy")
        merged = next(m.id for m in cortadel.of_user(p1) if "penicillin" in m.text)
        cortadel.unreported = [derived]
        # the same fact again (merged into the earlier one, SKIP_DUPLICATE) and a new one
        gone = await send_reveal(
            c, "Patient reports a penicillin allergy", metadata=subject, message_id="dup-1"
        )
        await until(lambda: len(cortadel.calls_to(STORE)) >= 2, what="the second turn stored")
        await send_reveal(c, HIV, contextId=gone["contextId"])
        await _held(cortadel, p1, HIV)
        await until(
            lambda: any(m.text == derived for m in cortadel.of_user(p1)), what="derived memory"
        )
        ledger = await LongTermStore(c.app.state.runtime.store).ledger(
            Principal("t1", "alice"), gone["contextId"]
        )
        scrub = (await _scrub(c, gone["contextId"])).headers["x-request-id"]

        async def forgotten() -> list[dict[str, Any]]:
            page = await c.get(
                "/audit", params={"operation": "forget_memories"}, headers=auth("admin")
            )
            return [e for e in page.json()["items"] if e.get("scrubOf") == scrub]

        (entry,) = await until(forgotten, what="the deletion's audit entry")
    assert merged in ledger  # a duplicate merged into an earlier memory is the turn's too
    left = {m.text for m in cortadel.of_user(p1)}
    assert HIV not in left and derived not in left
    assert "Patient reports a penicillin allergy" not in left  # merged: deleted with it
    sweeps = [
        s for s in cortadel.calls_to(SEARCH) if s["body"].get("session_id") == gone["contextId"]
    ]
    assert sweeps and all(s["body"]["user_id"] == p1 for s in sweeps)
    assert entry["removed"]["memories"] >= len(ledger) + 1
    assert kept["contextId"] != gone["contextId"] and cortadel.errors == []


async def test_a_run_records_which_memories_it_was_shown(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    shown = cortadel.seed(_uid("Patient/1"), "allergic to penicillin")
    async with gateway(store_turns=False) as c:
        await _probed(c)
        task = await send_reveal(c, "penicillin?", metadata={"subject": "Patient/1"})
        again = await send_reveal(c, "penicillin again?", contextId=task["contextId"])

        async def entries() -> list[dict[str, Any]]:
            params = {"operation": "recall_memories"}
            page = await c.get("/audit", params=params, headers=auth("admin"))
            items: list[dict[str, Any]] = page.json()["items"]
            return items

        (entry,) = await until(entries, what="the run's audit entry")
        trail = (await c.get("/audit", headers=auth("admin"))).text
    assert task["metadata"]["recalledMemoryIds"] == [shown]
    assert "recalledMemoryIds" not in (again.get("metadata") or {})  # shown before: not again
    assert entry["recalledMemoryIds"] == shown
    assert (entry["taskId"], entry["contextId"], entry["user"]) == (
        task["id"],
        task["contextId"],
        "alice",
    )
    assert "penicillin" not in trail


async def test_await_persist_returns_once_the_turn_is_stored(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    async with gateway() as c:
        await _probed(c)
        cortadel.delay = 0.4
        await send_task(c, "stored before the answer", agent="persisting", headers=auth("alice"))
        held = [m.text for m in cortadel.of_user(ALICE)]
        cortadel.delay = 0.0
    assert "stored before the answer" in held


async def test_await_persist_gives_up_after_the_timeout(
    gateway: Gateway, cortadel: CortadelServer, redis: RawRedis
) -> None:
    async with gateway(timeout_seconds=0.5) as c:
        await _probed(c)
        cortadel.down = True
        task = await send_task(c, "kept in the outbox", agent="persisting", headers=auth("alice"))
        assert cortadel.of_user(ALICE) == []
        cortadel.down = False
        await _held(cortadel, ALICE, "kept in the outbox")
    assert task["status"]["state"] == "completed"


async def _mcp(c: httpx.AsyncClient, user: str, method: str, params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {**auth(user), "Accept": "application/json, text/event-stream"}
    r = await c.post("/mcp", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["result"]


async def test_the_mcp_memory_tools_are_bound_to_the_contexts_subject(
    gateway: Gateway, cortadel: CortadelServer
) -> None:
    cortadel.seed(_uid("Patient/1"), "allergic to penicillin")
    cortadel.seed(_uid("Patient/2"), "Patient 2 is HIV positive")
    async with gateway(store_turns=False, retrieve=False) as c:
        await _probed(c)
        task = await send_reveal(c, "admit", metadata={"subject": "Patient/1"})
        cid = task["contextId"]
        listed = await _mcp(c, "alice", "tools/list", {})

        async def call(name: str, user: str = "alice", **arguments: Any) -> dict[str, Any]:
            params = {"name": name, "arguments": {"contextId": cid, **arguments}}
            result: dict[str, Any] = await _mcp(c, user, "tools/call", params)
            return result

        found = await call("search_long_term_memory", query="HIV", top_k=10)
        added = await call("add_memories", text="Prefers oral medication")
        foreign = await call("search_long_term_memory", user="bob", query="HIV")
    names = {t["name"] for t in listed["tools"]}
    assert {"search_memory", "search_long_term_memory", "add_memories"} <= names
    assert found["content"][0]["text"] == "1. allergic to penicillin"
    assert added["content"][0]["text"] == "Stored."
    assert foreign["isError"] and "Context not found" in foreign["content"][0]["text"]
    assert [m.text for m in cortadel.of_user(_uid("Patient/1"))][-1] == "Prefers oral medication"
    ids = {call["body"]["user_id"] for call in cortadel.calls_to(SEARCH) + cortadel.calls_to(STORE)}
    assert ids == {_uid("Patient/1")}


async def test_outbox_jobs_carry_the_subject_sealed(
    gateway: Gateway, cortadel: CortadelServer, redis: RawRedis
) -> None:
    async with gateway() as c:
        await _probed(c)
        cortadel.down = True
        task = await send_reveal(c, "a turn", metadata={"subject": "Patient/1"})
        await until(lambda: cortadel.calls_to(STORE), what="a store attempt")
        await _scrub(c, task["contextId"])
        jobs = await redis.xrange(OUTBOX_STREAM)
        cortadel.down = False
        await until(lambda: outbox_settled(redis), what="the outbox to drain")
    assert len(jobs) == 2 and b"Patient" not in orjson.dumps(repr(jobs))
    sent = {c["body"]["user_id"] for c in cortadel.calls if c["body"] and "probe" not in str(c)}
    assert sent == {_uid("Patient/1")}  # the outbox opened the subject to reach its memories
