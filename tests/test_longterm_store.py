"""Long-term memory's store through Cortadel: turns stored without the injected block, the
durable outbox through outages and stalled jobs, waiting for a turn to be stored, and the
subject the outbox's jobs carry sealed."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from gateway.store.keys import OUTBOX as OUTBOX_STREAM
from gateway.store.keys import OUTBOX_GROUP
from tests.conftest import RawRedis, auth, outbox_settled, send_task
from tests.cortadel_gateway import ALICE, STORE, Gateway, _held, _probed, _scrub, _uid, send_reveal
from tests.cortadel_gateway import gateway as gateway
from tests.cortadel_server import CortadelServer
from tests.waiting import until


async def _retries(c: httpx.AsyncClient) -> float:
    """The outbox's retry count so far (a process-wide counter)."""
    for line in (await c.get("/metrics")).text.splitlines():
        if line.startswith("gateway_ltm_retries_total "):
            return float(line.split()[1])
    return 0.0


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
