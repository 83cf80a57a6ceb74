"""Long-term memory's ledger and scrub: a context's scrub deletes exactly what was stored
for it in Cortadel, its receipt and follow-up, and stores pending or landing after it."""

from __future__ import annotations

from typing import Any

import httpx

from gateway.principal import Principal
from gateway.store.keys import UserKeys
from gateway.store.longterm_store import LongTermStore
from tests.conftest import RawRedis, auth, outbox_settled
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
    _uid,
    send_reveal,
)
from tests.cortadel_gateway import gateway as gateway
from tests.cortadel_server import CortadelServer
from tests.waiting import until


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
