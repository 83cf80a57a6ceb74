"""Push notifications, shared by their tests: the gateway set up for webhooks on loopback, a
receiver that fails its first three deliveries, and the checks of a delivery's signature."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jwt
import orjson
import pytest

from gateway.store.jobs import JobStore
from gateway.store.keys import (
    PUSH,
    PUSH_DEAD,
    PUSH_GROUP,
)
from tests.conftest import API_KEYS, TEST_KEYRING, AppFactory, RawRedis, auth
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


async def drained(redis: RawRedis) -> bool:
    figures = await JobStore(redis, PUSH, PUSH_GROUP, PUSH_DEAD).figures()
    return figures.queued + figures.pending == 0
