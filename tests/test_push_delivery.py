"""Webhook deliveries: signed, with the config's token, retried until the receiver takes
them, each event id once; dead-lettered after the retry time; one webhook never holds up
another."""

from __future__ import annotations

import httpx

from gateway.store.keys import (
    PUSH_DEAD,
)
from tests.conftest import AppFactory, RawRedis, auth, message
from tests.push_gateway import (
    PUSH_SETTINGS,
    drained,
    rpc,
    verified,
)
from tests.push_gateway import (
    gateway as gateway,
)
from tests.push_gateway import (
    receiver as receiver,
)
from tests.waiting import until
from tests.webhook_receiver import Delivery, WebhookReceiver


async def test_every_event_reaches_a_failing_webhook_once_signed(
    gateway: httpx.AsyncClient, receiver: WebhookReceiver, redis: RawRedis
) -> None:
    """A 1.0 send carrying a config: the webhook fails its first three requests, then gets
    every status event of the task (submitted ... completed), each id once after dedupe,
    each signed over its body and carrying the token."""
    config = {"url": receiver.url, "token": "tok-1", "id": "hook-1"}
    r = await gateway.post(
        "/a2a/message:send",
        json={
            "message": {"role": "ROLE_USER", "parts": [{"text": "hi"}], "messageId": "m-push-1"},
            "configuration": {"taskPushNotificationConfig": config},
        },
    )
    assert r.status_code == 200, r.text
    task = r.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"

    def settled() -> dict[str, Delivery] | None:
        seen = receiver.unique()
        done = [
            d
            for d in seen.values()
            if d.json()["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        ]
        if not done:
            return None
        last = int(done[0].event_id.rsplit(".", 1)[1])
        wanted = {f"{task['id']}.{n}" for n in range(1, last + 1)}
        return seen if wanted <= set(seen) else None

    seen = await until(settled, what="every event of the task at the webhook")
    assert receiver.attempts > len(seen)  # the first three failed and were retried
    states = [seen[i].json()["statusUpdate"]["status"]["state"] for i in sorted(seen)]
    assert states[0] == "TASK_STATE_SUBMITTED" and states[-1] == "TASK_STATE_COMPLETED"
    for delivery in seen.values():
        claims = await verified(gateway, delivery, "tok-1", receiver.url)
        assert claims["taskId"] == task["id"]
        assert delivery.json()["statusUpdate"]["taskId"] == task["id"]
    await until(lambda: drained(redis), what="the deliveries acknowledged")
    assert await redis.xlen(PUSH_DEAD) == 0


async def test_a_0_3_config_set_later_gets_tasks(
    gateway: httpx.AsyncClient, receiver: WebhookReceiver
) -> None:
    """0.3 JSON-RPC: set, get, list and delete a config of a task; while it is set, a state
    change reaches the webhook as the Task."""
    receiver.fail = 0
    sent = await gateway.post(
        "/v1/message:send",
        json={"message": message("hi"), "configuration": {"blocking": False}},
    )
    task_id = sent.json()["task"]["id"]
    config = {"url": receiver.url, "token": "tok-2", "id": "a"}
    answer = await rpc(
        gateway,
        "tasks/pushNotificationConfig/set",
        {"taskId": task_id, "pushNotificationConfig": config},
    )
    assert answer["result"] == {"taskId": task_id, "pushNotificationConfig": config}
    got = await rpc(
        gateway,
        "tasks/pushNotificationConfig/get",
        {"id": task_id, "pushNotificationConfigId": "a"},
    )
    assert got["result"] == answer["result"]
    listed = await rpc(gateway, "tasks/pushNotificationConfig/list", {"id": task_id})
    assert listed["result"] == [answer["result"]]
    r = await gateway.post(f"/v1/tasks/{task_id}:cancel")
    assert r.status_code in (200, 409), r.text
    if r.status_code == 200:  # the cancel changed the state: the webhook hears of it
        delivered = await until(
            lambda: [d for d in receiver.accepted if d.json()["status"]["state"] == "canceled"],
            what="the canceled task at the webhook",
        )
        await verified(gateway, delivered[0], "tok-2", receiver.url)
    deleted = await rpc(
        gateway,
        "tasks/pushNotificationConfig/delete",
        {"id": task_id, "pushNotificationConfigId": "a"},
    )
    assert deleted["result"] is None
    listed = await rpc(gateway, "tasks/pushNotificationConfig/list", {"id": task_id})
    assert listed["result"] == []
    missing = await rpc(
        gateway,
        "tasks/pushNotificationConfig/get",
        {"id": task_id, "pushNotificationConfigId": "a"},
    )
    assert missing["error"]["code"] == -32001


async def test_an_event_undelivered_for_the_retry_time_is_dead_lettered(
    make_app: AppFactory, redis: RawRedis
) -> None:
    hook = WebhookReceiver(fail=10**9).start()
    try:
        async with make_app(**PUSH_SETTINGS, push_retry_seconds=0.3) as gw:
            gw.headers.update(auth("alice"))
            r = await gw.post(
                "/v1/message:send",
                json={
                    "message": message("hi"),
                    "configuration": {"pushNotificationConfig": {"url": hook.url}},
                },
            )
            assert r.status_code == 200, r.text
            await until(lambda: redis.xlen(PUSH_DEAD), what="a dead-lettered event")
            assert hook.attempts >= 2
    finally:
        hook.stop()


async def test_a_webhook_that_recovers_gets_its_waiting_events_at_once(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """Events that failed against a webhook wait minutes for their next try, but a delivery
    to the same origin that succeeds wakes them: the backlog drains at once."""
    hook = WebhookReceiver().start()
    hook.down = True
    slow = {**PUSH_SETTINGS, "push_backoff_first_seconds": 600, "push_backoff_max_seconds": 600}
    try:
        async with make_app(**slow) as gw:
            gw.headers.update(auth("alice"))
            config = {"pushNotificationConfig": {"url": hook.url}}
            r = await gw.post(
                "/v1/message:send", json={"message": message("hi"), "configuration": config}
            )
            assert r.status_code == 200, r.text
            waiting = r.json()["task"]["id"]
            await until(lambda: hook.attempts >= 2, what="the first events refused")
            hook.down = False
            r = await gw.post(
                "/v1/message:send", json={"message": message("hi"), "configuration": config}
            )
            assert r.status_code == 200, r.text
            # Their next try is 300 s away at the soonest: only the wake-up delivers them.
            await until(
                lambda: any(
                    d.json()["id"] == waiting and d.json()["status"]["state"] == "completed"
                    for d in hook.accepted
                ),
                what="the waiting events delivered",
            )
            await until(lambda: drained(redis), what="the deliveries acknowledged")
    finally:
        hook.stop()


async def test_a_dead_webhook_does_not_hold_up_another(make_app: AppFactory) -> None:
    """One request slot: events retrying against a dead webhook wait without it, so a live
    webhook's events still arrive."""
    dead, live = WebhookReceiver(fail=10**9).start(), WebhookReceiver().start()
    try:
        async with make_app(**PUSH_SETTINGS, push_concurrency=1) as gw:
            gw.headers.update(auth("alice"))
            for _ in range(3):
                config = {"pushNotificationConfig": {"url": dead.url}}
                r = await gw.post(
                    "/v1/message:send", json={"message": message("hi"), "configuration": config}
                )
                assert r.status_code == 200, r.text
            await until(lambda: dead.attempts >= 6, what="the dead webhook retried")
            config = {"pushNotificationConfig": {"url": live.url}}
            r = await gw.post(
                "/v1/message:send", json={"message": message("hi"), "configuration": config}
            )
            task_id = r.json()["task"]["id"]
            await until(
                lambda: any(d.json()["status"]["state"] == "completed" for d in live.accepted),
                what="the live webhook's events",
            )
            assert {d.json()["id"] for d in live.accepted} == {task_id}
    finally:
        dead.stop()
        live.stop()


async def test_a_stalled_webhook_takes_no_more_than_its_origins_share(
    make_app: AppFactory,
) -> None:
    """Four request slots, two per origin: a webhook that holds every request open gets two,
    and another webhook's events arrive meanwhile (not after the stalled ones time out)."""
    stalled, live = WebhookReceiver().start(), WebhookReceiver().start()
    stalled.stalled = True
    try:
        settings = {**PUSH_SETTINGS, "push_timeout_seconds": 300}
        async with make_app(**settings, push_concurrency=4, push_per_origin=2) as gw:
            gw.headers.update(auth("alice"))

            async def send(url: str) -> str:
                config = {"pushNotificationConfig": {"url": url}}
                body = {"message": message("hi"), "configuration": config}
                r = await gw.post("/v1/message:send", json=body)
                assert r.status_code == 200, r.text
                return str(r.json()["task"]["id"])

            for _ in range(4):  # a dozen events for the stalled webhook
                await send(stalled.url)
            await until(lambda: stalled.holding == 2, what="the stalled webhook's share")
            task_id = await send(live.url)
            await until(
                lambda: any(d.json()["status"]["state"] == "completed" for d in live.accepted),
                what="the live webhook's events",
            )
            assert {d.json()["id"] for d in live.accepted} == {task_id}
            assert stalled.holding == stalled.most_held == 2
            stalled.release.set()
    finally:
        stalled.stop()
        live.stop()


async def test_artifact_updates_when_configured(
    make_app: AppFactory, receiver: WebhookReceiver
) -> None:
    """With GATEWAY_PUSH_ARTIFACTS a 1.0 webhook also gets each artifact the run adds."""
    receiver.fail = 0
    async with make_app(**PUSH_SETTINGS, push_artifacts=True) as gw:
        gw.headers.update(auth("alice"))
        body = {
            "message": {"role": "ROLE_USER", "parts": [{"text": "hi"}], "messageId": "m-art"},
            "configuration": {"taskPushNotificationConfig": {"url": receiver.url}},
        }
        task = (await gw.post("/a2a/message:send", json=body)).json()["task"]
        updates = await until(
            lambda: [d.json()["artifactUpdate"] for d in receiver.accepted
                     if "artifactUpdate" in d.json()],
            what="an artifact update at the webhook",
        )  # fmt: skip
        assert updates[0]["taskId"] == task["id"]
        assert updates[0]["artifact"] in task["artifacts"]


async def test_a_redirect_is_not_followed_and_gives_the_event_up(
    gateway: httpx.AsyncClient, receiver: WebhookReceiver, redis: RawRedis
) -> None:
    receiver.fail, receiver.status = 0, 307
    config = {"pushNotificationConfig": {"url": receiver.url}}
    r = await gateway.post(
        "/v1/message:send", json={"message": message("hi"), "configuration": config}
    )
    assert r.status_code == 200
    await until(lambda: redis.xlen(PUSH_DEAD), what="the event dead-lettered")
    dead = await redis.xrange(PUSH_DEAD)
    assert b"307" in dead[0][1][b"reason"]
    assert all(d.event_id.endswith(".1") or d.event_id.endswith(".2") for d in receiver.accepted)
