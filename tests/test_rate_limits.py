"""Rate limits shared by replicas: per principal, per tenant, and failed authentications
per client address; 429 with Retry-After and the IETF RateLimit fields."""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import httpx
import orjson

from tests.conftest import API_KEYS, AppFactory, auth, message
from tests.test_openapi import conform

KEYS = orjson.dumps(API_KEYS).decode()
# Windows of an hour: no request is replenished while a test runs, however slow the machine.
HOUR = 3600


async def _statuses(clients: list[httpx.AsyncClient], n: int, user: str = "alice") -> list[int]:
    out = []
    for i in range(n):
        r = await clients[i % len(clients)].get("/v1/contexts", headers=auth(user))
        out.append(r.status_code)
    return out


async def _replicas(
    make_app: AppFactory, n: int, **settings: Any
) -> tuple[AsyncExitStack, list[httpx.AsyncClient]]:
    stack = AsyncExitStack()
    clients = [
        await stack.enter_async_context(make_app(api_keys=KEYS, **settings)) for _ in range(n)
    ]
    return stack, clients


async def test_two_replicas_share_one_budget(make_app: AppFactory, redis: Any) -> None:
    limits = {"rate_limit_user": f"10/{HOUR}"}
    stack, one = await _replicas(make_app, 1, **limits)
    async with stack:
        alone = await _statuses(one, 30)
    await redis.flushall()
    stack, two = await _replicas(make_app, 2, **limits)
    async with stack:
        shared = await _statuses(two, 30)
    assert alone.count(429) == shared.count(429) == 20
    assert alone == shared == [200] * 10 + [429] * 20


async def test_429_names_the_limit_and_carries_the_rate_limit_fields(make_app: AppFactory) -> None:
    async with make_app(api_keys=KEYS, rate_limit_user=f"2/{HOUR}") as gw:
        first = await gw.get("/v1/contexts", headers=auth("alice"))
        assert first.status_code == 200
        assert first.headers["ratelimit-policy"] == f'"user";q=2;w={HOUR}'
        assert first.headers["ratelimit"].startswith('"user";r=1;t=')
        await gw.get("/v1/contexts", headers=auth("alice"))
        r = await gw.get("/v1/contexts", headers=auth("alice"))
        assert r.status_code == 429
        body = r.json()
        assert body["error"] == "RateLimitedError" and body["data"]["limit"] == "user"
        assert "user" in body["message"]
        assert 1700 <= int(r.headers["retry-after"]) <= HOUR  # one request every 30 min
        assert r.headers["ratelimit"].startswith('"user";r=0;')
        conform(r, "/v1/contexts")
        # Another principal has its own budget; health, readiness and metrics are exempt.
        assert (await gw.get("/v1/contexts", headers=auth("bob"))).status_code == 200
        for path in ("/healthz", "/readyz", "/metrics"):
            assert (await gw.get(path, headers=auth("alice"))).status_code == 200, path
        metrics = (await gw.get("/metrics")).text
        assert 'gateway_rate_limited_total{limit="user"}' in metrics


async def test_a_tenant_limit_spans_its_users_and_tenants_have_their_own(
    make_app: AppFactory,
) -> None:
    own = orjson.dumps({"t2": {"tenant": f"1/{HOUR}"}}).decode()
    async with make_app(api_keys=KEYS, rate_limit_tenant=f"5/{HOUR}", rate_limit_tenants=own) as gw:
        assert await _statuses([gw], 3, "alice") == [200] * 3
        assert await _statuses([gw], 3, "bob") == [200, 200, 429]
        r = await gw.get("/v1/contexts", headers=auth("bob"))
        assert r.json()["data"]["limit"] == "tenant"
        assert await _statuses([gw], 2, "carol") == [200, 429]  # t2: its own, smaller limit


async def test_failed_authentication_throttles_the_failing_attempts_only(
    make_app: AppFactory,
) -> None:
    """An address over its failure limit has its failing attempts answered 429; a valid key
    from it (another client behind the same proxy) is still served."""
    async with make_app(api_keys=KEYS, auth_failure_limit=f"3/{HOUR}") as gw:
        bad = {"Authorization": "Bearer guess"}
        answers = [await gw.get("/v1/contexts", headers=bad) for _ in range(5)]
        assert [r.status_code for r in answers] == [401, 401, 401, 429, 429]
        r = answers[-1]
        assert r.json()["data"]["limit"] == "auth" and int(r.headers["retry-after"]) >= 1
        # Any other wrong key from the address is throttled too...
        other = await gw.get("/v1/contexts", headers={"X-API-Key": "another-guess"})
        assert other.status_code == 429 and other.json()["data"]["limit"] == "auth"
        # ...while the right ones are served, as before the failures.
        for user in ("alice", "bob"):
            assert (await gw.get("/v1/contexts", headers=auth(user))).status_code == 200
        assert (await gw.get("/healthz")).status_code == 200


async def test_each_call_of_a_json_rpc_batch_counts(make_app: AppFactory) -> None:
    """A batch is as many requests as it holds calls: those over the limit are refused one
    by one (the batch's last ones) and do not run, notifications included."""

    def send(n: int, notification: bool = False) -> dict[str, Any]:
        call: dict[str, Any] = {"jsonrpc": "2.0", "method": "message/send", "id": n}
        call["params"] = {"message": message(f"m{n}", message_id=f"b-{n}")}
        if notification:
            del call["id"]
        return call

    async with make_app(api_keys=KEYS, rate_limit_user=f"5/{HOUR}") as gw:
        batch = [send(n, notification=n in (2, 8)) for n in range(10)]
        r = await gw.post("/", json=batch, headers=auth("alice"))
        assert r.status_code == 200, r.text
        answers = r.json()
        assert [a["id"] for a in answers] == [0, 1, 3, 4, 5, 6, 7, 9]
        assert ["result" in a for a in answers] == [True] * 4 + [False] * 4
        for refused in answers[4:]:
            assert refused["error"]["code"] == -32027
            assert refused["error"]["data"]["data"]["limit"] == "user"
        assert r.headers["ratelimit"].startswith('"user";r=0;')
        r = await gw.post("/", json=[send(20), send(21)], headers=auth("alice"))
        assert r.status_code == 429  # nothing left: refused as any request
    async with make_app(api_keys=KEYS) as unlimited:
        # five ran (a notification among them), the others did not
        listed = (await unlimited.get("/v1/contexts", headers=auth("alice"))).json()
        assert listed["total"] == 5


async def test_a_batch_passes_as_far_as_every_limit_lets_it(make_app: AppFactory) -> None:
    limits = {"rate_limit_user": f"5/{HOUR}", "rate_limit_tenant": f"3/{HOUR}"}
    async with make_app(api_keys=KEYS, **limits) as gw:
        get = {"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "nope"}}
        r = await gw.post("/", json=[{**get, "id": n} for n in range(4)], headers=auth("alice"))
        errors = [a["error"] for a in r.json()]
        assert [e["code"] for e in errors] == [-32001] * 3 + [-32027]
        assert errors[3]["data"][0]["reason"] == "RATE_LIMITED"
        assert errors[3]["data"][0]["metadata"]["limit"] == "tenant"
        user, tenant = r.headers["ratelimit"].split(", ")
        assert user.startswith('"user";r=2;') and tenant.startswith('"tenant";r=0;')
