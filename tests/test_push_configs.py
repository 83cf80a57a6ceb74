"""Push configs: the allowlist at setting and at delivery, a scrub that stops deliveries, the
keys the card and JWKS publish, configs sealed at rest."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import jwt
import orjson

from gateway.store.keys import (
    PUSH_DEAD,
    UserKeys,
)
from gateway.store.rotation import Rotation
from gateway.store.sealing import Keyring, Sealer, key_id_of
from tests.conftest import TEST_KEYRING, AppFactory, RawRedis, auth, message
from tests.push_gateway import (
    NEW_ONLY,
    OLD_ONLY,
    PUSH_SETTINGS,
    REFUSED_URL,
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
from tests.waiting import stays, until
from tests.webhook_receiver import WebhookReceiver


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
        await until(lambda: drained(redis), what="the deliveries dropped")
        stopped_at = hook.attempts
        await stays(
            lambda: hook.attempts <= stopped_at + 2,  # at most requests already under way
            1.0,
            what="no more delivery attempts after the scrub",
        )
        assert await redis.xlen(PUSH_DEAD) == 0
    finally:
        hook.stop()


async def test_the_card_offers_push_and_the_keys_are_public(gateway: httpx.AsyncClient) -> None:
    card = (await gateway.get("/.well-known/agent-card.json")).json()
    assert card["capabilities"]["pushNotifications"] is True
    r = await gateway.get("/.well-known/jwks.json", headers={"Authorization": ""})
    assert r.status_code == 200
    (key,) = r.json()["keys"]
    assert key["kty"] == "EC" and key["alg"] == "ES256" and "d" not in key


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
