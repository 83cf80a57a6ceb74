"""The per-task run policy: messages that continue a task whose run is under way.

``enqueue`` (default): each message is stored, acknowledged and gets its own run, in arrival
order, after the runs before it. ``reject``: 409 TaskBusyError, nothing stored. ``interrupt``:
the running run is superseded and the new message runs with everything stored so far.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.store.keys import JOBS, JOBS_GROUP
from tests.conftest import AppFactory, RawRedis, post_message, send_task
from tests.processes import serving, slow_process_test
from tests.waiting import until

ASKS = {"finalState": "input-required"}  # every run hands the turn back: the task stays open


@pytest.fixture(params=["stream", "memory"])
async def client(make_app: AppFactory, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """The gateway on the durable queue and on the in-process one: the policy is the same."""
    async with make_app(queue=request.param) as c:
        yield c


def _echo(**options: Any) -> dict[str, Any]:
    return {"echo": {**ASKS, **options}}


async def _task(c: httpx.AsyncClient, tid: str) -> dict[str, Any]:
    r = await c.get(f"/v1/tasks/{tid}", params={"historyLength": 1000})
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()
    return task


def _turns(task: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The texts of the user messages in the order they were accepted, and the texts the
    agent echoed, in the order its replies were stored."""
    users: list[str] = []
    replies: list[str] = []
    for m in task.get("history", ()):
        text = m["parts"][0].get("text")
        (users if m["role"] == "user" else replies).append(text)
    return users, replies


async def _replies(c: httpx.AsyncClient, tid: str, count: int) -> dict[str, Any]:
    """The task once it holds ``count`` agent replies and has settled."""

    async def answered() -> dict[str, Any] | None:
        task = await _task(c, tid)
        _, replies = _turns(task)
        settled = task["status"]["state"] == "input-required"
        return task if settled and len(replies) >= count else None

    return await until(answered, timeout=60, what=f"{count} replies on task {tid}")


async def _open(c: httpx.AsyncClient) -> dict[str, Any]:
    task: dict[str, Any] = await send_task(c, "open", metadata=_echo())
    assert task["status"]["state"] == "input-required"
    return task


async def _continue(
    c: httpx.AsyncClient,
    task: dict[str, Any],
    text: str,
    *,
    blocking: bool = False,
    policy: str | None = None,
    **echo: Any,
) -> httpx.Response:
    """Continue the task; ``echo`` are the echo agent's options, ``policy`` the message's."""
    metadata = _echo(**echo)
    if policy is not None:
        metadata["runPolicy"] = policy
    return await post_message(
        c,
        text,
        taskId=task["id"],
        contextId=task["contextId"],
        metadata=metadata,
        configuration={"blocking": blocking},
    )


async def test_concurrent_continuations_each_get_their_own_reply_in_order(
    client: httpx.AsyncClient,
) -> None:
    task = await _open(client)
    texts = [f"message {i}" for i in range(20)]
    sent = await asyncio.gather(*(_continue(client, task, t, delayMs=30) for t in texts))
    assert [r.status_code for r in sent] == [200] * 20, [r.text for r in sent]
    done = await _replies(client, task["id"], 21)
    users, replies = _turns(done)
    assert sorted(users[1:]) == sorted(texts)
    assert replies == users  # one reply per message, in the order the messages arrived
    assert len(done["artifacts"]) == 21


async def test_sequential_non_blocking_continuations_get_one_reply_each(
    client: httpx.AsyncClient,
) -> None:
    task = await _open(client)
    texts = [f"step {i}" for i in range(10)]
    for text in texts:
        r = await _continue(client, task, text, delayMs=50)
        assert r.status_code == 200, r.text
    done = await _replies(client, task["id"], 11)
    users, replies = _turns(done)
    assert users == ["open", *texts]
    assert replies == users


async def test_a_waiting_run_sees_the_replies_before_it(client: httpx.AsyncClient) -> None:
    task = await _open(client)
    first = await _continue(client, task, "first", delayMs=300)
    second = await _continue(client, task, "second")
    assert first.status_code == second.status_code == 200
    done = await _replies(client, task["id"], 3)
    reports = [a["parts"][-1]["data"]["echo"] for a in done["artifacts"]]
    # open | open, reply, first | open, reply, first, reply (not "second": it is its own)
    assert [r["historyMessages"] for r in reports] == [0, 2, 4]


async def test_each_blocking_send_answers_with_its_own_run(client: httpx.AsyncClient) -> None:
    task = await _open(client)
    texts = [f"blocking {i}" for i in range(5)]
    answers = await asyncio.gather(
        *(_continue(client, task, t, blocking=True, delayMs=30) for t in texts)
    )
    for text, r in zip(texts, answers, strict=True):
        assert r.status_code == 200, r.text
        answered = r.json()["task"]
        assert answered["artifacts"][-1]["parts"][0]["text"] == text
    done = await _replies(client, task["id"], 6)
    users, replies = _turns(done)
    assert replies == users


async def test_a_task_settles_only_when_no_message_waits(client: httpx.AsyncClient) -> None:
    """A run that would end the task while another message waits hands it on instead: the
    waiting message runs, and the last run's outcome is the task's."""
    task = await _open(client)
    first = await _continue(client, task, "done?", delayMs=300, finalState="completed")
    second = await _continue(client, task, "one more thing", finalState="completed")
    assert first.status_code == second.status_code == 200

    async def completed() -> dict[str, Any] | None:
        current = await _task(client, task["id"])
        return current if current["status"]["state"] == "completed" else None

    done = await until(completed, what="the task to complete")
    users, replies = _turns(done)
    assert replies == users == ["open", "done?", "one more thing"]


async def test_reject_refuses_while_a_run_is_under_way_and_stores_nothing(
    client: httpx.AsyncClient,
) -> None:
    task = await _open(client)
    running = await _continue(client, task, "slow", delayMs=3000)
    assert running.status_code == 200
    body = {
        "message": {
            "role": "user",
            "parts": [{"kind": "text", "text": "refused"}],
            "messageId": "refused-once",
            "taskId": task["id"],
            "contextId": task["contextId"],
            "metadata": {"runPolicy": "reject"},
        }
    }
    r = await client.post("/v1/message:send", json=body)
    assert r.status_code == 409, r.text
    assert r.json()["error"] == "TaskBusyError"
    assert "refused" not in r.text
    users, _ = _turns(await _task(client, task["id"]))
    assert users == ["open", "slow"]
    # Nothing was stored: once the run settles, the same messageId is a new message.
    await _replies(client, task["id"], 2)
    r = await client.post("/v1/message:send", json=body)
    assert r.status_code == 200, r.text
    users, replies = _turns(await _task(client, task["id"]))
    assert users == replies == ["open", "slow", "refused"]


async def test_interrupt_supersedes_the_running_run(
    client: httpx.AsyncClient, redis: RawRedis
) -> None:
    task = await _open(client)
    # A blocking send whose run would take a minute: the interrupt must release it.
    slow = asyncio.create_task(_continue(client, task, "slow", blocking=True, delayMs=60_000))

    async def working() -> bool:
        return bool((await _task(client, task["id"]))["status"]["state"] == "working")

    await until(working, what="the slow run to start")
    r = await _continue(client, task, "instead", blocking=True, policy="interrupt")
    assert r.status_code == 200, r.text
    answered = r.json()["task"]
    assert answered["status"]["state"] == "input-required"
    report = answered["artifacts"][-1]["parts"][-1]["data"]["echo"]
    assert report["historyMessages"] == 3  # open, its reply and the interrupted "slow"
    released = await asyncio.wait_for(slow, 30)
    assert released.status_code == 200
    users, replies = _turns(await _task(client, task["id"]))
    assert users == ["open", "slow", "instead"]
    assert replies == ["open", "instead"]

    async def acknowledged() -> bool:
        if not await redis.exists(JOBS):
            return True
        return bool((await redis.xpending(JOBS, JOBS_GROUP))["pending"] == 0)

    await until(acknowledged, what="the superseded run's job to be acknowledged")
    assert await redis.xlen(JOBS) == 0


async def test_policy_comes_from_the_agent_entry_and_the_server_default(
    make_app: AppFactory,
) -> None:
    async with make_app(run_policy="reject") as c:
        task = await _open(c)
        assert (await _continue(c, task, "slow", delayMs=2000)).status_code == 200
        refused = await _continue(c, task, "refused")
        assert refused.status_code == 409, refused.text
        # The message may choose otherwise.
        chosen = await _continue(c, task, "queued", policy="enqueue")
        assert chosen.status_code == 200, chosen.text
        await _replies(c, task["id"], 3)

        entry = {"id": "patient", "name": "Patient", "type": "echo"}
        entry["config"] = {"runPolicy": "enqueue"}  # type: ignore[assignment]
        assert (await c.post("/agents", json=entry)).status_code == 201
        opened = await send_task(c, "open", agent="patient", metadata=_echo())
        base = "/agents/patient/v1/message:send"
        for text in ("slow", "queued"):
            r = await post_message(
                c,
                text,
                path=base,
                taskId=opened["id"],
                contextId=opened["contextId"],
                metadata=_echo(delayMs=300),
                configuration={"blocking": False},
            )
            assert r.status_code == 200, r.text
        await _replies(c, opened["id"], 3)


async def test_an_unknown_policy_is_a_bad_request(client: httpx.AsyncClient) -> None:
    task = await _open(client)
    r = await _continue(client, task, "x", policy="whenever")
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "InvalidParamsError"
    assert "whenever" not in r.text


async def test_cancel_drops_the_waiting_messages(client: httpx.AsyncClient) -> None:
    task = await _open(client)
    assert (await _continue(client, task, "slow", delayMs=60_000)).status_code == 200
    waiting = asyncio.create_task(_continue(client, task, "waits", blocking=True))

    async def stored() -> bool:
        return len(_turns(await _task(client, task["id"]))[0]) == 3

    await until(stored, what="the waiting message to be stored")
    r = await client.post(f"/v1/tasks/{task['id']}:cancel")
    assert r.status_code == 200, r.text
    answer = await asyncio.wait_for(waiting, 30)
    assert answer.json()["task"]["status"]["state"] == "canceled"
    users, replies = _turns(await _task(client, task["id"]))
    assert users == ["open", "slow", "waits"]
    assert replies == ["open"]


async def test_continuations_across_two_replicas_each_get_a_reply_in_order(
    make_app: AppFactory,
) -> None:
    async with make_app() as one, make_app() as two:
        task = await _open(one)
        texts = [f"replica message {i}" for i in range(20)]
        sent = await asyncio.gather(
            *(_continue((one, two)[i % 2], task, t, delayMs=20) for i, t in enumerate(texts))
        )
        assert [r.status_code for r in sent] == [200] * 20
        done = await _replies(two, task["id"], 21)
        users, replies = _turns(done)
        assert sorted(users[1:]) == sorted(texts)
        assert replies == users


@slow_process_test
async def test_a_worker_killed_while_messages_wait_loses_none(
    tmp_path: Path, redis_url: str, redis: RawRedis
) -> None:
    env = {"REDIS_URL": redis_url, "GATEWAY_JOB_LEASE_SECONDS": "2"}
    texts = [f"waiting {i}" for i in range(4)]
    with serving(tmp_path, **env) as (first, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:
            task = await _open(c)
            r = await _continue(c, task, "interrupted by a crash", delayMs=3000)
            assert r.status_code == 200
            for text in texts:
                assert (await _continue(c, task, text)).status_code == 200

            async def working() -> bool:
                return bool((await _task(c, task["id"]))["status"]["state"] == "working")

            await until(working, what="the first run to start", logs=tmp_path)
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
    with serving(tmp_path, **env) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:

            async def all_answered() -> dict[str, Any] | None:
                current = await _task(c, task["id"])
                _, replies = _turns(current)
                return current if len(replies) == 6 else None

            done = await until(
                all_answered, timeout=90, what="every waiting message's run", logs=tmp_path
            )
    users, replies = _turns(done)
    assert users == ["open", "interrupted by a crash", *texts]
    assert replies == users
    assert await redis.xlen(JOBS) == 0


@pytest.mark.parametrize("policy", ["enqueue", "interrupt"])
async def test_idempotent_replay_of_a_continuation_runs_once(
    client: httpx.AsyncClient, policy: str
) -> None:
    task = await _open(client)
    body = {
        "message": {
            "role": "user",
            "parts": [{"kind": "text", "text": "once"}],
            "messageId": f"replayed-{policy}",
            "taskId": task["id"],
            "contextId": task["contextId"],
            "metadata": {**_echo(delayMs=100), "runPolicy": policy},
        }
    }
    answers = await asyncio.gather(*(client.post("/v1/message:send", json=body) for _ in range(3)))
    assert [r.status_code for r in answers] == [200] * 3
    done = await _replies(client, task["id"], 2)
    users, replies = _turns(done)
    assert users == replies == ["open", "once"]
    assert orjson.dumps(answers[0].json()["task"]["id"]) == orjson.dumps(task["id"])
