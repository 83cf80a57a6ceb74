"""Long-term memory's erasure and access without the context: an erasure outlives the
context, its receipt holds no content, and without a subject it takes only subjectless
memories."""

from __future__ import annotations

from typing import Any

from gateway.longterm.render import cortadel_user_id
from tests.conftest import auth
from tests.cortadel_gateway import (
    ALICE,
    HIV,
    MEMORIES,
    Gateway,
    _held,
    _probed,
    _scrub,
    _uid,
    send_reveal,
)
from tests.cortadel_gateway import gateway as gateway
from tests.cortadel_server import CortadelServer
from tests.waiting import until


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
