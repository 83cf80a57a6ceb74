"""Long-term memory per subject: recall per (tenant, user, subject), never across
patients under one key, data parts sent only when asked, and the MCP memory tools bound to
the context's subject."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from gateway.longterm.render import cortadel_user_id
from tests.conftest import auth
from tests.cortadel_gateway import (
    ALICE,
    HIV,
    SEARCH,
    STORE,
    Gateway,
    _deletes,
    _held,
    _probed,
    _scrub,
    _seen,
    _uid,
    send_reveal,
)
from tests.cortadel_gateway import gateway as gateway
from tests.cortadel_server import CortadelServer
from tests.waiting import until


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
