"""Durable execution across processes: crashes, replicas, Redis restarts, shutdown."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.embedded_redis import EmbeddedRedis
from gateway.store.jobs import JobStore
from gateway.store.keys import DEAD_LETTERS, JOBS, JOBS_GROUP
from tests.agents import Partial, StoreFlaky
from tests.conftest import AppFactory, RawRedis, message, post_message
from tests.processes import PROCESS_SECONDS, serving, slow_process_test, working
from tests.waiting import stays, until

FAST = {"GATEWAY_JOB_LEASE_SECONDS": "1", "GATEWAY_REDIS_TIMEOUT_SECONDS": "1"}
HTTP_SECONDS = 30  # a blocking send to a replica on a busy machine


async def _available(c: httpx.AsyncClient, tid: str, logs: Path) -> dict[str, Any]:
    """The task, retrying while the gateway answers 503 (as a client honouring Retry-After
    would); any other error is returned as it is."""

    async def answered() -> dict[str, Any] | None:
        r = await c.get(f"/v1/tasks/{tid}")
        return None if r.status_code == 503 else r.json()

    return await until(answered, what=f"task {tid} to be readable", every=0.1, logs=logs)


async def _task(c: httpx.AsyncClient, tid: str) -> dict[str, Any]:
    got: dict[str, Any] = (await c.get(f"/v1/tasks/{tid}")).json()
    return got


@slow_process_test
async def test_worker_killed_mid_run_task_completes_elsewhere_without_duplicates(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    env = {**FAST, "REDIS_URL": redis_url}
    with serving(tmp_path, "--no-workers", **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=HTTP_SECONDS) as c:
            with working(tmp_path, "first", **env) as first:
                meta = {"sleep": 30, "once": str(tmp_path / "ran-once")}
                r = await post_message(
                    c, "x", agent="partial", metadata=meta, configuration={"blocking": False}
                )
                tid = r.json()["task"]["id"]

                async def halfway() -> bool:
                    task = await _task(c, tid)
                    return task["status"]["state"] == "working" and "artifacts" in task

                await until(halfway, what="the run to be half done", logs=tmp_path)
                first.send_signal(signal.SIGKILL)
                first.wait(timeout=PROCESS_SECONDS)
            with working(tmp_path, "second", **env):

                async def completed() -> dict[str, Any] | None:
                    task = await _task(c, tid)
                    return task if task["status"]["state"] == "completed" else None

                task = await until(
                    completed, timeout=45, what="the second worker to finish it", logs=tmp_path
                )
    assert [a["name"] for a in task["artifacts"]] == ["partial", "final"]
    texts = [m["parts"][0]["text"] for m in task["history"]]
    assert texts == ["x", "working on it", "done"]
    assert await redis.xlen(JOBS) == 0
    assert (await redis.xpending(JOBS, JOBS_GROUP))["pending"] == 0


@slow_process_test
async def test_blocking_send_and_cancel_across_replicas(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    env = {**FAST, "REDIS_URL": redis_url}
    with serving(tmp_path, "--no-workers", **env) as (_, base), working(tmp_path, "w", **env):
        async with httpx.AsyncClient(base_url=base, timeout=HTTP_SECONDS) as c:
            # blocking: replica A has no workers; the worker process runs it and A returns
            done = await post_message(c, "hello", agent="echo")
            assert done.json()["task"]["status"]["state"] == "completed"
            assert done.json()["task"]["artifacts"][0]["parts"][0]["text"] == "hello"
            # cancel through A stops the run on the worker long before its 20 s sleep ends
            # (a bound with room for a busy machine: two processes and a pub/sub hop)
            r = await post_message(
                c, "x", agent="partial", metadata={"sleep": 20}, configuration={"blocking": False}
            )
            tid = r.json()["task"]["id"]

            async def working_now() -> bool:
                return bool((await _task(c, tid))["status"]["state"] == "working")

            await until(working_now, what="the worker to start the run", logs=tmp_path)
            started = time.monotonic()
            canceled = await c.post(f"/v1/tasks/{tid}:cancel")
            assert canceled.json()["status"]["state"] == "canceled"

            async def job_released() -> bool:
                return bool((await redis.xpending(JOBS, JOBS_GROUP))["pending"] == 0)

            await until(
                job_released,
                timeout=5.0,
                what="the worker to stop the canceled run and release its job",
                logs=tmp_path,
            )
            assert time.monotonic() - started < 5.0

            async def only_the_first_half() -> bool:
                task = await _task(c, tid)
                names = [a["name"] for a in task["artifacts"]]
                return task["status"]["state"] == "canceled" and names == ["partial"]

            # a window in which a late write of the stopped run would show; there must be none
            await stays(only_the_first_half, 0.3, what="the canceled task unchanged", logs=tmp_path)
            task = await _task(c, tid)
    assert task["status"]["state"] == "canceled"
    assert [a["name"] for a in task["artifacts"]] == ["partial"]  # never the final half


@slow_process_test
async def test_same_message_id_on_two_replicas_makes_one_task(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    env = {**FAST, "REDIS_URL": redis_url}
    with serving(tmp_path, **env) as (_, a), serving(tmp_path, **env) as (_, b):
        async with httpx.AsyncClient(base_url=a) as ca, httpx.AsyncClient(base_url=b) as cb:
            body = {"message": message("same", message_id="dup-1")}
            replies = await asyncio.gather(
                *(client.post("/v1/message:send", json=body) for client in (ca, cb) * 8)
            )
            assert {r.status_code for r in replies} == {200}
            assert len({r.json()["task"]["id"] for r in replies}) == 1
            contexts = (await ca.get("/v1/contexts")).json()
    assert contexts["total"] == 1 and contexts["items"][0]["taskCount"] == 1
    page_history = replies[0].json()["task"]
    assert page_history["status"]["state"] == "completed"


async def test_job_that_keeps_failing_is_dead_lettered(
    make_app: AppFactory, redis: RawRedis
) -> None:
    async with make_app(
        agents=[StoreFlaky(), Partial()], job_lease_seconds=0.4, job_max_attempts=2
    ) as c:
        r = await post_message(c, "x", agent="flaky", configuration={"blocking": False})
        tid = r.json()["task"]["id"]

        async def failed() -> dict[str, Any] | None:
            task = await _task(c, tid)
            return task if task["status"]["state"] == "failed" else None

        task = await until(failed, what="the task to fail")
        # The job is dead-lettered after its task is failed, by the same sweep: wait for it
        # (with the gateway still up, so that sweep can finish).
        dead = await until(lambda: redis.xrange(DEAD_LETTERS), what="the job's dead letter")
    assert task["status"]["message"]["parts"][0]["text"] == (
        "The task could not be run after several attempts."
    )
    assert len(dead) == 1 and dead[0][1][b"reason"] == b"stalled 2 times"
    assert b"x" not in dead[0][1][b"job"].split(b'"')  # ids only, no content
    assert await redis.xlen(JOBS) == 0


@slow_process_test
async def test_redis_killed_and_restarted_loses_no_acknowledged_work(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "aof", appendfsync="always")
    server.start()
    try:
        with serving(tmp_path, **FAST, REDIS_URL=server.url) as (_, base):
            async with httpx.AsyncClient(base_url=base, timeout=HTTP_SECONDS) as c:
                done = [(await post_message(c, f"m{i}")).json()["task"] for i in range(20)]
                queued = [
                    (await post_message(c, f"q{i}", configuration={"blocking": False})).json()[
                        "task"
                    ]
                    for i in range(10)
                ]
                assert server.process is not None
                server.process.send_signal(signal.SIGKILL)
                server.process.wait(timeout=PROCESS_SECONDS)
                server.start()

                async def ready() -> bool:
                    return (await c.get("/readyz")).status_code == 200

                await until(ready, what="the gateway to be ready again", logs=tmp_path)
                for task in done:
                    got = await _available(c, task["id"], tmp_path)
                    assert got["status"]["state"] == "completed", got
                    assert [m["role"] for m in got["history"]] == ["user", "agent"]

                async def all_done() -> bool:
                    tasks = [await _available(c, t["id"], tmp_path) for t in queued]
                    return all(t["status"]["state"] == "completed" for t in tasks)

                await until(all_done, timeout=30, what="the queued runs to finish", logs=tmp_path)
    finally:
        server.stop()


@slow_process_test
async def test_sigterm_worker_finishes_or_leaves_jobs_for_another(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    env = {**FAST, "REDIS_URL": redis_url, "GATEWAY_SHUTDOWN_GRACE_SECONDS": "0.5"}
    with serving(tmp_path, "--no-workers", **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=HTTP_SECONDS) as c:
            with working(tmp_path, "leaving", **env) as leaving:
                short = await post_message(
                    c,
                    "s",
                    agent="partial",
                    metadata={"sleep": 0.2},
                    configuration={"blocking": False},
                )
                long = await post_message(
                    c,
                    "l",
                    agent="partial",
                    metadata={"sleep": 30, "once": str(tmp_path / "once")},
                    configuration={"blocking": False},
                )

                async def both_started() -> bool:
                    states = [
                        (await _task(c, r.json()["task"]["id"]))["status"]["state"]
                        for r in (short, long)
                    ]
                    return all(s in ("working", "completed") for s in states)

                await until(both_started, what="both runs to start", logs=tmp_path)
                leaving.send_signal(signal.SIGTERM)
                assert leaving.wait(timeout=PROCESS_SECONDS) == 0
            assert (await _task(c, short.json()["task"]["id"]))["status"]["state"] == "completed"
            long_id = long.json()["task"]["id"]
            assert (await _task(c, long_id))["status"]["state"] == "working"
            # not acknowledged: still pending, or back in the queue once its (1 s) lease passed
            left = await JobStore(redis).figures()
            assert left.queued + left.pending == 1, left
            with working(tmp_path, "taking-over", **env):

                async def finished() -> bool:
                    return bool((await _task(c, long_id))["status"]["state"] == "completed")

                await until(
                    finished, timeout=30, what="the other worker to finish it", logs=tmp_path
                )
            task = await _task(c, long_id)
    assert [a["name"] for a in task["artifacts"]] == ["partial", "final"]


async def test_sends_survive_a_missing_consumer_group(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """A Redis that lost the group (flushed, replaced) still takes sends; runs resume."""
    async with make_app() as c:
        assert (await post_message(c, "before")).status_code == 200
        await redis.delete(JOBS)
        r = await post_message(c, "after")
        assert r.status_code == 200
        assert r.json()["task"]["status"]["state"] == "completed"


async def test_cluster_mode_replay_queues_a_job_lost_to_a_crash(redis: RawRedis) -> None:
    """On a cluster the job is queued after the message (another slot). If the process dies
    in between, the client's retry of the same message queues it."""
    import orjson

    from gateway.errors import StoreUnavailableError
    from gateway.principal import Principal
    from gateway.store.redis_store import Queueing, RunQueue, SendWrite, Store

    class DiesBeforeQueueing(Store):
        async def _queue_job(self, *args: Any, **kwargs: Any) -> str:
            raise StoreUnavailableError()

    principal = Principal("t", "u")
    msg = {
        "kind": "message",
        "role": "user",
        "messageId": "m1",
        "contextId": "c1",
        "taskId": "t1",
        "parts": [{"kind": "text", "text": "x"}],
    }
    write = SendWrite(
        context_id="c1",
        task_id="t1",
        continuing=False,
        new_context=True,
        message_id="m1",
        digest="d",
        message_json=orjson.dumps(msg),
        metadata_json=b"",
        status_json=b'{"state":"submitted"}',
        reference_ids=(),
        job_json=orjson.dumps({"t": "t", "u": "u", "a": "echo", "c": "c1", "k": "t1", "r": []}),
        queueing=Queueing(RunQueue.STREAM),
    )
    with pytest.raises(StoreUnavailableError):
        await DiesBeforeQueueing(redis, 3600, cluster=True).send(principal, write)
    assert await redis.xlen(JOBS) == 0  # the message is stored, its job is not
    replay = await Store(redis, 3600, cluster=True).send(principal, write)
    assert replay.duplicate
    entries = await redis.xrange(JOBS)
    assert len(entries) == 1
    assert orjson.loads(entries[0][1][b"job"])["k"] == "t1" and entries[0][1][b"seq"] == b"1"
    again = await Store(redis, 3600, cluster=True).send(principal, write)
    assert again.duplicate and await redis.xlen(JOBS) == 1  # queued once, not per replay


async def test_a_worker_without_the_agent_leaves_the_job_to_one_that_has_it(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """Replicas mid-deploy may differ: a job must not fail on a worker that lacks its agent."""
    async with make_app(agents=[Partial()], workers=False) as front:
        r = await post_message(front, "x", agent="partial", configuration={"blocking": False})
        tid = r.json()["task"]["id"]
        async with make_app(job_lease_seconds=0.4) as lacking:  # takes the job, cannot run it

            async def taken() -> bool:
                return bool((await redis.xpending(JOBS, JOBS_GROUP))["pending"] > 0)

            async def submitted() -> bool:
                return bool((await _task(lacking, tid))["status"]["state"] == "submitted")

            await until(taken, what="the replica without the agent to take the job")
            # past its lease: the job must still not have failed here
            await stays(submitted, 0.5, what="the task waiting for a worker with its agent")
        async with make_app(agents=[Partial()], job_lease_seconds=0.4) as able:

            async def completed() -> bool:
                return bool((await _task(able, tid))["status"]["state"] == "completed")

            await until(completed, what="the replica with the agent to run it")
