"""Push notifications: configs over every binding, and webhook deliveries — signed, with
the config's token, retried until the receiver takes them, each event id once after
dedupe; a scrub stops them; a URL the allowlist refuses is refused when set."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import orjson
import pytest

from gateway.store.fields import PUSH_EVENTS
from gateway.store.jobs import JobStore
from gateway.store.keys import (
    CONTEXT_KEY_COUNT,
    PUSH,
    PUSH_CONTEXTS,
    PUSH_DEAD,
    PUSH_GROUP,
    ContextKeys,
    UserKeys,
)
from gateway.store.lua.context import CancelArgs
from gateway.store.redis_store import Store
from gateway.store.rotation import Rotation
from gateway.store.sealing import Keyring, Sealer, key_id_of
from tests.conftest import API_KEYS, CLUSTER, TEST_KEYRING, AppFactory, RawRedis, auth, message
from tests.waiting import stays, until
from tests.webhook_receiver import Delivery, WebhookReceiver

PUBLIC_URL = "https://gw.test"
PUSH_SETTINGS: dict[str, Any] = {
    "api_keys": orjson.dumps(API_KEYS).decode(),
    "push_allowlist": "127.0.0.1",  # the receivers, on loopback
    "public_url": PUBLIC_URL,
    "push_backoff_first_seconds": 0.05,
    "push_backoff_max_seconds": 0.2,
}
REFUSED_URL = "http://10.11.12.13:9/hook"
OLD_ONLY = orjson.dumps({"k9": orjson.loads(TEST_KEYRING)["k9"]}).decode()
NEW_ONLY = orjson.dumps({"k0": orjson.loads(TEST_KEYRING)["k0"]}).decode()


@pytest.fixture
async def gateway(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app(**PUSH_SETTINGS) as c:
        c.headers.update(auth("alice"))
        yield c


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    hook = WebhookReceiver(fail=3).start()
    yield hook
    hook.stop()


async def verified(
    gw: httpx.AsyncClient, delivery: Delivery, token: str, url: str
) -> dict[str, Any]:
    """The delivery's JWT claims, checked against the gateway's JWKS and the body: issued
    by the gateway's public URL, for the webhook's URL."""
    jwks = (await gw.get("/.well-known/jwks.json", headers={"Authorization": ""})).json()
    signature = delivery.headers["x-a2a-notification-signature"]
    assert delivery.headers["authorization"] == f"Bearer {signature}"
    kid = jwt.get_unverified_header(signature)["kid"]
    key = jwt.PyJWK(next(k for k in jwks["keys"] if k["kid"] == kid))
    claims: dict[str, Any] = jwt.decode(
        signature, key, algorithms=["ES256", "RS256"], audience=url, issuer=PUBLIC_URL
    )
    assert claims["request_body_sha256"] == hashlib.sha256(delivery.body).hexdigest()
    assert claims["jti"] == delivery.event_id
    assert delivery.headers["x-a2a-notification-token"] == token
    return claims


async def rpc(gw: httpx.AsyncClient, method: str, params: dict[str, Any]) -> dict[str, Any]:
    r = await gw.post("/", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


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
    await until(lambda: _drained(redis), what="the deliveries acknowledged")
    assert await redis.xlen(PUSH_DEAD) == 0


async def _drained(redis: RawRedis) -> bool:
    figures = await JobStore(redis, PUSH, PUSH_GROUP, PUSH_DEAD).figures()
    return figures.queued + figures.pending == 0


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


async def test_a_url_the_allowlist_refuses_is_refused_when_set(
    gateway: httpx.AsyncClient,
) -> None:
    sent = await gateway.post("/v1/message:send", json={"message": message("hi")})
    task_id = sent.json()["task"]["id"]
    refused = {"url": REFUSED_URL}
    answer = await rpc(
        gateway,
        "tasks/pushNotificationConfig/set",
        {"taskId": task_id, "pushNotificationConfig": refused},
    )
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"]["data"]["errors"][0]["field"] == "pushNotificationConfig.url"
    r = await gateway.post(f"/a2a/tasks/{task_id}/pushNotificationConfigs", json=refused)
    assert r.status_code == 400
    assert r.json()["error"]["details"][0]["reason"] == "INVALID_PARAMS"
    r = await gateway.post(
        "/v1/message:send",
        json={"message": message("hi"), "configuration": {"pushNotificationConfig": refused}},
    )
    assert r.status_code == 400, r.text
    listed = await rpc(gateway, "tasks/pushNotificationConfig/list", {"id": task_id})
    assert listed["result"] == []


async def test_a_scrub_mid_retry_stops_delivery(
    gateway: httpx.AsyncClient, redis: RawRedis
) -> None:
    hook = WebhookReceiver(fail=10**9).start()
    try:
        r = await gateway.post(
            "/v1/message:send",
            json={
                "message": message("hi"),
                "configuration": {"pushNotificationConfig": {"url": hook.url}},
            },
        )
        context_id = r.json()["task"]["contextId"]
        await until(lambda: hook.attempts >= 3, what="the webhook retried")
        assert (await gateway.delete(f"/v1/contexts/{context_id}")).status_code == 204
        await until(lambda: _drained(redis), what="the deliveries dropped")
        stopped_at = hook.attempts
        await stays(
            lambda: hook.attempts <= stopped_at + 2,  # at most requests already under way
            1.0,
            what="no more delivery attempts after the scrub",
        )
        assert await redis.xlen(PUSH_DEAD) == 0
    finally:
        hook.stop()


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
            await until(lambda: _drained(redis), what="the deliveries acknowledged")
    finally:
        hook.stop()


async def test_the_card_offers_push_and_the_keys_are_public(gateway: httpx.AsyncClient) -> None:
    card = (await gateway.get("/.well-known/agent-card.json")).json()
    assert card["capabilities"]["pushNotifications"] is True
    r = await gateway.get("/.well-known/jwks.json", headers={"Authorization": ""})
    assert r.status_code == 200
    (key,) = r.json()["keys"]
    assert key["kty"] == "EC" and key["alg"] == "ES256" and "d" not in key


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


async def test_several_signing_keys_are_published_and_the_first_signs(
    make_app: AppFactory, receiver: WebhookReceiver, tmp_path: Path
) -> None:
    """Rotation: every configured key is in the JWKS; the first one signs."""
    from gateway.push.signing import SigningKey, generate_pem

    paths, kids = [], []
    for name in ("new", "old"):
        pem, path = generate_pem(), tmp_path / f"{name}.pem"
        path.write_bytes(pem)
        paths.append(str(path))
        kids.append(SigningKey.from_pem(pem).kid)
    receiver.fail = 0
    async with make_app(**PUSH_SETTINGS, push_signing_keys=",".join(paths)) as gw:
        gw.headers.update(auth("alice"))
        jwks = (await gw.get("/.well-known/jwks.json")).json()
        assert [k["kid"] for k in jwks["keys"]] == kids
        config = {"pushNotificationConfig": {"url": receiver.url, "token": "t"}}
        await gw.post("/v1/message:send", json={"message": message("hi"), "configuration": config})
        (first, *_) = await until(lambda: receiver.accepted, what="a delivery")
        assert (
            jwt.get_unverified_header(first.headers["x-a2a-notification-signature"])["kid"]
            == kids[0]
        )
        await verified(gw, first, "t", receiver.url)


async def test_the_allowlist_is_checked_again_at_delivery(
    make_app: AppFactory, receiver: WebhookReceiver, redis: RawRedis
) -> None:
    """A config set where the URL was allowed, delivered by a replica whose allowlist no
    longer allows it: refused before any request is made, and given up."""
    receiver.fail = 0
    narrower = {**PUSH_SETTINGS, "push_allowlist": "192.0.2.1"}
    async with make_app(**PUSH_SETTINGS, workers=False) as setter, make_app(**narrower):
        setter.headers.update(auth("alice"))
        config = {"blocking": False, "pushNotificationConfig": {"url": receiver.url}}
        r = await setter.post(
            "/v1/message:send", json={"message": message("hi"), "configuration": config}
        )
        assert r.status_code == 200, r.text
        await until(lambda: redis.xlen(PUSH_DEAD), what="the event given up")
        dead = await redis.xrange(PUSH_DEAD)
        assert b"not allowed" in dead[0][1][b"reason"]
        assert receiver.attempts == 0


async def test_configs_are_sealed_at_rest_and_rotate_data_reseals_them(
    make_app: AppFactory, receiver: WebhookReceiver, redis: RawRedis
) -> None:
    """With encryption on, Redis holds neither a config's URL nor its token (only what the
    scripts route by); get and list return them, delivery uses them, and after rotate-data
    they are sealed with the new key and still read once the old one is gone."""
    receiver.fail = 0
    secret = uuid.uuid4().hex
    url, token = f"{receiver.url}?ward={secret}", f"tok-{secret}"
    config = {"id": "a", "url": url, "token": token}  # its field ends like artifacts' (':a')
    async with make_app(**PUSH_SETTINGS, encryption_keys=OLD_ONLY) as gw:
        gw.headers.update(auth("alice"))
        body = {"message": message("hi"), "configuration": {"pushNotificationConfig": config}}
        task = (await gw.post("/v1/message:send", json=body)).json()["task"]
        tasks = UserKeys.of("t1", "alice").context(task["contextId"]).tasks
        stored = await redis.hget(tasks, f"{task['id']}:pn:a")
        assert stored is not None and orjson.loads(stored)["t"] == "t1"
        raw = b"".join(v for v in (await redis.hgetall(tasks)).values())
        assert secret.encode() not in raw and b"127.0.0.1" not in raw
        got = await rpc(
            gw,
            "tasks/pushNotificationConfig/get",
            {"id": task["id"], "pushNotificationConfigId": "a"},
        )
        assert got["result"]["pushNotificationConfig"] == config
        (first, *_) = await until(lambda: receiver.accepted, what="a delivery")
        assert first.headers["x-a2a-notification-token"] == token
    figures = await Rotation(redis, Sealer(Keyring.parse(TEST_KEYRING))).run()
    assert figures.resealed >= 1 and figures.unreadable == 0, figures
    resealed = orjson.loads(await redis.hget(tasks, f"{task['id']}:pn:a"))
    assert key_id_of(resealed["x"].encode()) == "k0" and secret not in str(resealed)
    async with make_app(**PUSH_SETTINGS, encryption_keys=NEW_ONLY) as gw:
        gw.headers.update(auth("alice"))
        listed = await rpc(gw, "tasks/pushNotificationConfig/list", {"id": task["id"]})
        assert listed["result"][0]["pushNotificationConfig"] == config


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
