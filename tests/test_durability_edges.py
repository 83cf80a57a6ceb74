"""Edges of durable execution: how soon a killed process's runs resume, what dead letters
keep (and for how long), and the consumers processes leave in the stream groups."""

from __future__ import annotations

import signal
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.options.longterm import CortadelSettings
from gateway.store.jobs import RECLAIMER, JobStore
from gateway.store.keys import (
    DEAD_LETTERS,
    EMBEDS,
    EMBEDS_DEAD,
    EMBEDS_GROUP,
    JOBS,
    JOBS_GROUP,
    MAINTENANCE_LEADER,
    OUTBOX,
    OUTBOX_DEAD,
    OUTBOX_GROUP,
)
from tests.agents import Partial
from tests.conftest import AppFactory, RawRedis, post_message
from tests.cortadel_server import CortadelServer
from tests.processes import serving
from tests.waiting import until

GROUPS = ((JOBS, JOBS_GROUP), (EMBEDS, EMBEDS_GROUP), (OUTBOX, OUTBOX_GROUP))
DEAD_STREAMS = (DEAD_LETTERS, EMBEDS_DEAD, OUTBOX_DEAD)


async def _consumers(redis: RawRedis, stream: str, group: str) -> list[str]:
    try:
        rows = await redis.xinfo_consumers(stream, group)
    except Exception as exc:  # no stream or group: no consumers
        if "no such key" in str(exc).lower() or "nogroup" in str(exc).lower():
            return []
        raise
    return [r["name"].decode() if isinstance(r["name"], bytes) else r["name"] for r in rows]


async def _state(c: httpx.AsyncClient, tid: str) -> str:
    got = await c.get(f"/v1/tasks/{tid}")
    return str(got.json()["status"]["state"]) if got.status_code == 200 else ""


async def _steal(redis: RawRedis, stream: str, group: str, consumer: str, count: int = 10) -> int:
    """Read jobs as a consumer that then dies (what a killed process leaves behind)."""
    reply: Any = await redis.xreadgroup(group, consumer, {stream: ">"}, count=count)
    return len(reply[0][1]) if reply else 0


# -- a killed process's runs -----------------------------------------------------------------

# The lease is long enough that a leader lock outliving its holder by half a lease (the old
# design: 1.5 × lease, then up to half a lease more before another process noticed) lands
# past the asserted bound, and short enough for a test.
LEASE = 24.0
SLACK = 5.0  # for a busy 2-core machine, on top of the documented lease + 5 s


async def _right_after_a_lead_renewal(redis: RawRedis, seconds: float) -> None:
    """Return just after the maintenance lead is renewed (the worst moment to kill its holder:
    a lead that must expire before anyone reclaims lives longest); give up after ``seconds``."""
    last = await redis.pttl(MAINTENANCE_LEADER)

    async def renewed() -> bool:
        nonlocal last
        now = await redis.pttl(MAINTENANCE_LEADER)
        renewed, last = bool(now > last), now
        return renewed

    with suppress(AssertionError):  # none seen in time: kill it now all the same
        await until(renewed, timeout=seconds, what="a renewal of the maintenance lead")


@pytest.mark.timeout(300)
async def test_runs_of_a_killed_process_resume_within_the_lease_plus_five_seconds(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    env = {"REDIS_URL": redis_url, "GATEWAY_JOB_LEASE_SECONDS": str(LEASE)}
    with serving(tmp_path, **env) as (first, first_base):
        async with httpx.AsyncClient(base_url=first_base) as a:

            async def led() -> bool:
                return bool(await redis.exists(MAINTENANCE_LEADER))

            await until(led, timeout=LEASE, what="the first process to lead", logs=tmp_path)
            meta = {"sleep": 600, "once": str(tmp_path / "ran-once")}
            r = await post_message(
                a,
                "x",
                agent="partial",
                metadata=meta,
                configuration={"blocking": False},
                timeout=30,
            )
            tid = r.json()["task"]["id"]

            async def held_by_first() -> bool:
                task = (await a.get(f"/v1/tasks/{tid}")).json()
                if task["status"]["state"] != "working" or "artifacts" not in task:
                    return False
                rows = await redis.xpending_range(JOBS, JOBS_GROUP, "-", "+", 10)
                return any(f":{first.pid}:" in r["consumer"].decode() for r in rows)

            await until(held_by_first, timeout=30, what="the first to hold the run", logs=tmp_path)
        # the second process starts after the first holds the run and the lead
        with serving(tmp_path, **env) as (_, second_base):
            async with httpx.AsyncClient(base_url=second_base) as c:
                await _right_after_a_lead_renewal(redis, LEASE)
                first.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                first.wait(timeout=10)

                async def completed() -> dict[str, Any] | None:
                    task: dict[str, Any] = (await c.get(f"/v1/tasks/{tid}")).json()
                    return task if task["status"]["state"] == "completed" else None

                task = await until(
                    completed,
                    timeout=3 * LEASE,
                    what="the run's completion",
                    every=0.1,
                    logs=tmp_path,
                )
                took = time.monotonic() - killed
    print(f"resumed and finished {took:.1f} s after kill -9 (lease {LEASE:.0f} s)")
    assert took <= LEASE + 5 + SLACK, f"took {took:.1f} s"
    assert [a["name"] for a in task["artifacts"]] == ["partial", "final"]
    assert [m["parts"][0]["text"] for m in task["history"]] == ["x", "working on it", "done"]
    assert (await redis.xpending(JOBS, JOBS_GROUP))["pending"] == 0


# -- dead letters ----------------------------------------------------------------------------


def _memory(cortadel: CortadelServer) -> CortadelSettings:
    return CortadelSettings(
        url=cortadel.url,
        api_key="cortadel-key",
        probe=False,
        retrieve=False,
        backoff_max_seconds=0.3,
        timeout_seconds=2.0,
    )


async def _mentions(redis: RawRedis, needle: str) -> dict[str, int]:
    """How many entries of each dead stream mention ``needle`` in any field."""
    found = {}
    for stream in DEAD_STREAMS:
        entries = await redis.xrange(stream)
        found[stream] = sum(
            1 for _, fields in entries if any(needle.encode() in v for v in fields.values())
        )
    return found


async def test_scrub_removes_the_context_from_every_dead_letter_stream(
    make_app: AppFactory, redis: RawRedis, cortadel: CortadelServer
) -> None:
    # a finished turn Cortadel refuses: the outbox dead-letters it
    async with make_app(cortadel=_memory(cortadel), job_lease_seconds=0.5) as c:
        cortadel.fail_next = [400]
        done = (await post_message(c, "remember this", agent="echo", timeout=30)).json()["task"]
        cid = done["contextId"]

        async def refused() -> bool:
            return (await _mentions(redis, cid))[OUTBOX_DEAD] == 1

        async def embedded() -> bool:
            # else the app may stop mid-batch, leaving this embedding to be given up below
            memory = (await c.get(f"/v1/contexts/{cid}")).json()["memory"]
            return bool(memory["pending"] == 0)

        await until(refused, what="the refused turn's dead letter")
        await until(embedded, what="the context to be indexed")
    # a run and an embedding whose worker died, twice: maintenance gives them up
    settings = {"job_lease_seconds": 0.5, "job_max_attempts": 1, "workers": False}
    async with make_app(cortadel=_memory(cortadel), **settings) as front:
        ours = await post_message(
            front,
            "again",
            contextId=cid,
            configuration={"blocking": False},
            agent="echo",
            timeout=30,
        )
        other = await post_message(
            front, "elsewhere", configuration={"blocking": False}, agent="echo", timeout=30
        )
        other_cid = other.json()["task"]["contextId"]
        assert await _steal(redis, JOBS, JOBS_GROUP, "gone:1") == 2
        assert await _steal(redis, EMBEDS, EMBEDS_GROUP, "gone:1") == 2

        async def given_up() -> bool:  # both contexts' jobs (they are given up in turn)
            for context in (cid, other_cid):
                counts = await _mentions(redis, context)
                if counts[DEAD_LETTERS] != 1 or counts[EMBEDS_DEAD] != 1:
                    return False
            return True

        await until(given_up, what="the jobs to be given up")
        assert await _state(front, ours.json()["task"]["id"]) == "failed"
        assert (await front.delete(f"/v1/contexts/{cid}")).status_code == 204
        assert await _mentions(redis, cid) == dict.fromkeys(DEAD_STREAMS, 0)
        # another context's dead letters stay
        assert await _mentions(redis, other_cid) == {
            DEAD_LETTERS: 1,
            EMBEDS_DEAD: 1,
            OUTBOX_DEAD: 0,
        }
        assert (await front.delete(f"/v1/contexts/{cid}")).status_code == 404


async def test_a_job_given_up_after_its_context_was_scrubbed_leaves_no_dead_letter(
    make_app: AppFactory, redis: RawRedis
) -> None:
    settings = {"job_lease_seconds": 0.5, "job_max_attempts": 1, "workers": False}
    async with make_app(**settings) as front:
        r = await post_message(
            front, "x", configuration={"blocking": False}, agent="echo", timeout=30
        )
        cid = r.json()["task"]["contextId"]
        await JobStore(redis, EMBEDS, EMBEDS_GROUP, EMBEDS_DEAD).ensure_group()  # no indexer
        assert await _steal(redis, JOBS, JOBS_GROUP, "gone:1") == 1
        assert await _steal(redis, EMBEDS, EMBEDS_GROUP, "gone:1") == 1
        assert (await front.delete(f"/v1/contexts/{cid}")).status_code == 204

        async def given_up() -> bool:
            # the give-up acknowledges the job, then finds the context gone and drops the
            # dead letter it wrote (two steps on a cluster, where they live in two slots)
            pending = [await redis.xpending(s, g) for s, g in GROUPS[:2]]
            return all(p["pending"] == 0 for p in pending) and await _mentions(
                redis, cid
            ) == dict.fromkeys(DEAD_STREAMS, 0)

        await until(given_up, what="the jobs to be given up")
        assert await _mentions(redis, cid) == dict.fromkeys(DEAD_STREAMS, 0)


async def _dead_letter(front: httpx.AsyncClient, redis: RawRedis, count: int) -> None:
    """``count`` runs whose worker died, given up by maintenance."""
    for i in range(count):
        await post_message(
            front, f"m{i}", configuration={"blocking": False}, agent="echo", timeout=30
        )
    assert await _steal(redis, JOBS, JOBS_GROUP, "gone:1", count) == count

    async def given_up() -> bool:
        return int(await redis.xlen(DEAD_LETTERS)) >= count

    await until(given_up, what="the jobs to be given up")


async def test_dead_letters_are_kept_up_to_a_count_and_an_age(
    make_app: AppFactory, redis: RawRedis
) -> None:
    settings = {"job_lease_seconds": 0.3, "job_max_attempts": 1, "workers": False}
    async with make_app(dead_letter_max_entries=3, **settings) as front:
        await _dead_letter(front, redis, 5)
        newest = [e for e, _ in await redis.xrange(DEAD_LETTERS)][-3:]
        await front.app.state.runtime.maintenance.prune()  # type: ignore[attr-defined]
        assert [e for e, _ in await redis.xrange(DEAD_LETTERS)] == newest
    async with make_app(dead_letter_max_age_seconds=1, **settings) as front:
        maintenance = front.app.state.runtime.maintenance  # type: ignore[attr-defined]

        async def aged_out() -> bool:
            await maintenance.prune()
            return int(await redis.xlen(DEAD_LETTERS)) == 0

        await until(aged_out, what="the dead letters to age out", every=0.2)


# -- consumers -------------------------------------------------------------------------------


async def test_stopped_processes_leave_no_consumers(
    make_app: AppFactory, redis: RawRedis, cortadel: CortadelServer
) -> None:
    # The indexer reads the message's job, so its process has a consumer in every group.
    text = "hello"
    for _ in range(4):
        async with make_app(cortadel=_memory(cortadel)) as c:
            assert (await post_message(c, text, agent="echo", timeout=30)).json()["task"]["status"][
                "state"
            ] == "completed"

            async def reading() -> bool:
                return all([await _consumers(redis, *g) for g in GROUPS])

            await until(reading, what="consumers in every group")
        for stream, group in GROUPS:
            # a batch cut short by the stop is handed to the reclaimer (one consumer for all)
            assert set(await _consumers(redis, stream, group)) <= {RECLAIMER}, group


async def test_a_stopping_process_hands_its_unfinished_runs_back(
    make_app: AppFactory, redis: RawRedis, tmp_path: Path
) -> None:
    settings = {"agents": [Partial()], "job_lease_seconds": 1.0}
    async with make_app(shutdown_grace_seconds=0, **settings) as c:
        meta = {"sleep": 600, "once": str(tmp_path / "once")}
        r = await post_message(
            c, "x", agent="partial", timeout=30, metadata=meta, configuration={"blocking": False}
        )
        tid = r.json()["task"]["id"]

        async def halfway() -> bool:
            return await _state(c, tid) == "working"

        await until(halfway, what="the run to be working")
        mine = c.app.state.runtime.queue.consumer  # type: ignore[attr-defined]
    assert mine not in await _consumers(redis, JOBS, JOBS_GROUP)
    assert (await redis.xpending(JOBS, JOBS_GROUP))["pending"] == 1  # kept, for another worker
    async with make_app(**settings) as c:

        async def completed() -> bool:
            return await _state(c, tid) == "completed"

        await until(completed, what="the run to complete")


async def test_maintenance_prunes_idle_consumers_without_pending_jobs(
    make_app: AppFactory, redis: RawRedis
) -> None:
    async with make_app(job_lease_seconds=0.5, workers=False, embedder="none") as front:
        await JobStore(redis).ensure_group()
        await redis.xgroup_createconsumer(JOBS, JOBS_GROUP, "gone:1")  # died idle
        r = await post_message(
            front, "x", configuration={"blocking": False}, agent="echo", timeout=30
        )
        assert await _steal(redis, JOBS, JOBS_GROUP, "gone:2") == 1  # died holding a job
        maintenance = front.app.state.runtime.maintenance  # type: ignore[attr-defined]

        async def pruned() -> bool:
            await maintenance.prune()
            return not await _consumers(redis, JOBS, JOBS_GROUP)

        await until(pruned, what="the idle consumers to be pruned", every=0.2)
        # its job was reclaimed first, not lost with its consumer
        assert await redis.xlen(JOBS) == 1
        assert (await redis.xpending(JOBS, JOBS_GROUP))["pending"] == 0
    async with make_app() as worker:

        async def completed() -> bool:
            return await _state(worker, r.json()["task"]["id"]) == "completed"

        await until(completed, what="the run to complete")


async def test_consumers_holding_jobs_are_never_pruned(redis: RawRedis) -> None:
    jobs = JobStore(redis)
    await jobs.ensure_group()
    await redis.xadd(JOBS, {b"job": orjson.dumps({"t": "t", "u": "u", "c": "c"})})
    assert await _steal(redis, JOBS, JOBS_GROUP, "busy") == 1
    await redis.xgroup_createconsumer(JOBS, JOBS_GROUP, "idle")
    assert await jobs.prune_consumers(idle_ms=0) == 1
    assert await _consumers(redis, JOBS, JOBS_GROUP) == ["busy"]
    assert (await redis.xpending(JOBS, JOBS_GROUP))["pending"] == 1
