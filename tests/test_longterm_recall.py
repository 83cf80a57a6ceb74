"""Long-term memory's recall through Cortadel, against a stand-in that validates every
request against Cortadel's published contract: the options and their validation, the search
request, the injected block, dedupe, fail-open and strict recall, and what a run was shown."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.longterm.render import cortadel_user_id, strip_block
from gateway.options.longterm import CortadelSettings, MemoryOptions
from tests.conftest import auth, send_task
from tests.cortadel_gateway import ALICE, SEARCH, Gateway, _probed, _seen, _uid, send_reveal
from tests.cortadel_gateway import gateway as gateway
from tests.cortadel_server import CortadelServer
from tests.waiting import until

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
