"""Push on a Redis Cluster, where deliveries are queued in two steps: what is left between
them is moved by maintenance, and a scrub deletes what still waits in the context."""

from __future__ import annotations

import httpx
import orjson
import pytest

from gateway.store.fields import PUSH_EVENTS
from gateway.store.keys import (
    CONTEXT_KEY_COUNT,
    PUSH_CONTEXTS,
    ContextKeys,
    UserKeys,
)
from gateway.store.lua.context import CancelArgs
from gateway.store.redis_store import Store
from tests.conftest import CLUSTER, AppFactory, RawRedis, auth, message
from tests.push_gateway import (
    PUSH_SETTINGS,
)
from tests.push_gateway import (
    gateway as gateway,
)
from tests.push_gateway import (
    receiver as receiver,
)
from tests.waiting import stays, until
from tests.webhook_receiver import WebhookReceiver


@pytest.mark.skipif(not CLUSTER, reason="only a Redis Cluster queues deliveries in two steps")
async def test_deliveries_left_between_the_two_steps_are_moved_by_maintenance(
    make_app: AppFactory, receiver: WebhookReceiver, redis: RawRedis
) -> None:
    """A Redis Cluster: a process that ran a change's script (its deliveries wait in the
    context's slot) and died before its second step loses no event: maintenance moves it to
    the push stream and the webhook gets it, under the next event id."""
    receiver.fail = 0
    async with make_app(**PUSH_SETTINGS, job_lease_seconds=1.0) as gw:
        tid, cid, ck, last = await _waiting_task(gw, redis, receiver)
        # The dying process: the cancel script runs, its second step never does.
        store = Store(redis, 3600, cluster=True)
        status = orjson.dumps({"state": "canceled", "timestamp": "2026-01-01T00:00:00Z"})
        reply = await store.scripts.cancel(
            keys=ck.all()[:CONTEXT_KEY_COUNT],
            args=CancelArgs(cid, tid, status, 0, 3_600_000).argv(),
        )
        assert reply == [b"ok", b"push"]
        assert await redis.zcard(f"{ck.meta}:push") == 1
        # maintenance finds it through the contexts noted when the webhook was set
        assert await redis.zscore(PUSH_CONTEXTS, f"{ck.meta}:push") is not None
        canceled = await until(
            lambda: receiver.unique().get(f"{tid}.{last + 1}"),
            what="the stranded event delivered",
        )
        assert canceled.json()["status"]["state"] == "canceled"
        await until(
            lambda: _gone(redis, f"{ck.meta}:push"), what="the context's pending deliveries"
        )


async def _gone(redis: RawRedis, key: str) -> bool:
    return not await redis.exists(key)


async def _waiting_task(
    gw: httpx.AsyncClient, redis: RawRedis, receiver: WebhookReceiver
) -> tuple[str, str, ContextKeys, int]:
    """Alice's input-required task with a webhook, once every event so far reached it: its
    id, context id and keys, and how many events it had."""
    gw.headers.update(auth("alice"))
    body = {
        "message": message("hi", metadata={"echo": {"finalState": "input-required"}}),
        "configuration": {"pushNotificationConfig": {"url": receiver.url}},
    }
    task = (await gw.post("/v1/message:send", json=body)).json()["task"]
    assert task["status"]["state"] == "input-required"
    tid, cid = task["id"], task["contextId"]
    ck = UserKeys.of("t1", "alice").context(cid)
    return tid, cid, ck, await _delivered_so_far(redis, receiver, ck.tasks, tid)


async def _delivered_so_far(
    redis: RawRedis, receiver: WebhookReceiver, tasks: str, tid: str
) -> int:
    """Wait until the webhook has every event queued for the task so far (a 0.3 body is the
    task as it stands at delivery, so an event still on its way would show a later state);
    returns how many there are: the next event's number is one more."""

    async def count() -> int | None:
        queued = int(await redis.hget(tasks, f"{tid}{PUSH_EVENTS}") or 0)
        got = receiver.unique()
        return queued if queued and all(f"{tid}.{n}" in got for n in range(1, queued + 1)) else None

    return await until(count, what="every event so far at the webhook")


@pytest.mark.skipif(not CLUSTER, reason="only a Redis Cluster queues deliveries in two steps")
async def test_a_scrub_deletes_deliveries_still_waiting_in_the_context(
    make_app: AppFactory, receiver: WebhookReceiver, redis: RawRedis
) -> None:
    """A Redis Cluster: deliveries a dying process left in the context's slot go with the
    context's scrub, and never reach the webhook."""
    receiver.fail = 0
    async with make_app(**PUSH_SETTINGS) as gw:  # the default lease: the sweep waits 30 s
        tid, cid, ck, last = await _waiting_task(gw, redis, receiver)
        status = orjson.dumps({"state": "canceled", "timestamp": "2026-01-01T00:00:00Z"})
        reply = await Store(redis, 3600, cluster=True).scripts.cancel(
            keys=ck.all()[:CONTEXT_KEY_COUNT],
            args=CancelArgs(cid, tid, status, 0, 3_600_000).argv(),
        )
        assert reply == [b"ok", b"push"]
        assert (await gw.delete(f"/v1/contexts/{cid}")).status_code == 204
        assert not await redis.exists(f"{ck.meta}:push")
        await stays(
            lambda: f"{tid}.{last + 1}" not in receiver.unique(),
            1.0,
            what="no delivery of the scrubbed event",
        )
