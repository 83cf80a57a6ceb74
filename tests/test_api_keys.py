"""API keys managed in Redis: created (shown once), listed, revoked and rotated over the
admin routes and with `gateway keys`, honoured by every replica."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import io
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.cli import main
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, send_task
from tests.waiting import until

SECRET = "server-secret-for-key-hashes"
KEYS = orjson.dumps(API_KEYS).decode()


@pytest.fixture
async def replicas(
    make_app: AppFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    settings: dict[str, Any] = {"api_keys": KEYS, "api_key_secret": SECRET}
    async with make_app(**settings) as a, make_app(**settings) as b:
        yield a, b


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _all_redis_values(redis: RawRedis) -> bytes:
    out = b""
    async for name in redis.scan_iter(match="gw:{apikeys}*"):
        kind = await redis.type(name)
        if kind == b"hash":
            out += b"".join(k + v for k, v in (await redis.hgetall(name)).items())
    return out


async def test_a_key_is_shown_once_stored_as_a_keyed_hash_and_works_on_every_replica(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], redis: RawRedis
) -> None:
    a, b = replicas
    r = await a.post("/keys", json={"user": "dave", "name": "ehr"}, headers=auth("admin"))
    assert r.status_code == 201, r.text
    created = r.json()
    key, key_id = created["key"], created["id"]
    assert key.startswith(created["prefix"]) and created["tenant"] == "t1"
    assert key.encode() not in await _all_redis_values(redis)
    task = await send_task(b, "x", headers=bearer(key))
    # The key's principal is t1/dave: its task is dave's, not alice's.
    assert (await a.get(f"/v1/tasks/{task['id']}", headers=bearer(key))).status_code == 200
    assert (await a.get(f"/v1/tasks/{task['id']}", headers=auth("alice"))).status_code == 404
    shown = (await a.get(f"/keys/{key_id}", headers=auth("admin"))).json()
    assert "key" not in shown and shown["lastUsedAt"] is not None
    listed = (await b.get("/keys", headers=auth("admin"))).json()["items"]
    assert [k["id"] for k in listed] == [key_id] and "key" not in listed[0]
    assert key not in str(listed)


async def test_a_revoked_key_is_refused_by_every_replica_within_two_seconds(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = replicas
    key = (await a.post("/keys", json={"user": "dave"}, headers=auth("admin"))).json()
    assert (await b.get("/v1/contexts", headers=bearer(key["key"]))).status_code == 200
    revoked = time.monotonic()
    r = await a.delete(f"/keys/{key['id']}", headers=auth("admin"))
    assert r.status_code == 204

    async def refused() -> bool:
        r = await b.get("/v1/contexts", headers=bearer(key["key"]))
        return r.status_code == 401 and "revoked" in r.json()["message"]

    await until(refused, what="replica b to refuse the revoked key", timeout=2.0)
    assert time.monotonic() - revoked < 2.0
    shown = (await a.get(f"/keys/{key['id']}", headers=auth("admin"))).json()
    assert shown["revokedAt"] is not None


async def test_rotation_with_and_without_grace(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, b = replicas
    old = (
        await a.post("/keys", json={"user": "dave", "roles": ["admin"]}, headers=auth("admin"))
    ).json()
    r = await a.post(f"/keys/{old['id']}:rotate", json={"graceSeconds": 600}, headers=auth("admin"))
    assert r.status_code == 201, r.text
    new = r.json()
    assert new["roles"] == ["admin"] and new["user"] == "dave" and new["key"] != old["key"]
    for key in (old["key"], new["key"]):  # during the grace period both work
        assert (await b.get("/keys", headers=bearer(key))).status_code == 200
    assert (await a.get(f"/keys/{old['id']}", headers=auth("admin"))).json()["replacedBy"] == new[
        "id"
    ]
    r = await a.post(f"/keys/{new['id']}:rotate", headers=auth("admin"))
    newest = r.json()
    assert r.status_code == 201

    async def refused() -> bool:
        return (await b.get("/v1/contexts", headers=bearer(new["key"]))).status_code == 401

    await until(refused, what="the rotated key to be refused")
    assert (await b.get("/v1/contexts", headers=bearer(newest["key"]))).status_code == 200


async def test_an_expired_key_is_refused(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    a, _ = replicas
    key = (
        await a.post("/keys", json={"user": "dave", "expiresInSeconds": 1}, headers=auth("admin"))
    ).json()
    assert key["expiresAt"] is not None

    async def expired() -> bool:
        r = await a.get("/v1/contexts", headers=bearer(key["key"]))
        return r.status_code == 401 and "expired" in r.json()["message"]

    await until(expired, what="the key to expire")


async def test_keys_are_an_admins_and_stay_in_its_tenant(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], make_app: AppFactory
) -> None:
    a, _ = replicas
    assert (await a.post("/keys", json={"user": "x"}, headers=auth("alice"))).status_code == 403
    assert (await a.get("/keys", headers=auth("alice"))).status_code == 403
    key = (await a.post("/keys", json={"user": "x"}, headers=auth("admin"))).json()
    t2_admin = (
        await a.post("/keys", json={"user": "y", "roles": ["admin"]}, headers=auth("admin"))
    ).json()
    assert t2_admin["tenant"] == "t1"  # an admin creates keys of its own tenant only
    assert (await a.get(f"/keys/{key['id']}", headers=auth("carol"))).status_code == 403
    bad = await a.post("/keys", json={"user": "", "roles": ["no spaces"]}, headers=auth("admin"))
    assert bad.status_code == 400
    assert (await a.delete("/keys/000000000000", headers=auth("admin"))).status_code == 404
    forged = key["key"][:-4] + "AAAA"
    assert (await a.get("/v1/contexts", headers=bearer(forged))).status_code == 401
    async with make_app(api_keys=KEYS) as plain:
        r = await plain.get("/keys", headers=auth("admin"))
        assert r.status_code == 501


def _cli(*argv: str) -> Any:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["keys", *argv])
    assert code == 0, out.getvalue()
    return orjson.loads(out.getvalue())


async def test_the_command_line_manages_the_same_keys(
    make_app: AppFactory, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("GATEWAY_API_KEY_SECRET", SECRET)
    created = await asyncio.to_thread(
        _cli, "create", "--tenant", "t9", "--user", "ops", "--role", "admin"
    )
    async with make_app(api_key_secret=SECRET) as gw:
        r = await gw.get("/keys", headers=bearer(created["key"]))
        assert r.status_code == 200 and r.json()["items"][0]["id"] == created["id"]
        listed = await asyncio.to_thread(_cli, "list", "--tenant", "t9")
        assert [k["id"] for k in listed["items"]] == [created["id"]]
        rotated = await asyncio.to_thread(_cli, "rotate", created["id"])
        assert (await gw.get("/keys", headers=bearer(rotated["key"]))).status_code == 200
        revoked = await asyncio.to_thread(_cli, "revoke", rotated["id"])
        assert revoked["revokedAt"] is not None

        async def refused() -> bool:
            return (await gw.get("/keys", headers=bearer(rotated["key"]))).status_code == 401

        await until(refused, what="the revoked key to be refused")
        # Key changes made on the command line are on the tenant's record too.
        auditor = await asyncio.to_thread(
            _cli, "create", "--tenant", "t9", "--user", "audit", "--role", "admin"
        )
        trail = await gw.get(
            "/audit", params={"user": getpass.getuser()}, headers=bearer(auditor["key"])
        )
        changes = [(e["operation"], e["credential"], e["keyId"]) for e in trail.json()["items"]]
        assert changes == [
            ("create_key", "cli", auditor["id"]),
            ("revoke_key", "cli", rotated["id"]),
            ("rotate_key", "cli", rotated["id"]),
            ("create_key", "cli", created["id"]),
        ]


async def test_key_answers_conform_to_the_contract(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    from tests.test_openapi import conform

    a, _ = replicas
    created = await a.post("/keys", json={"user": "dave"}, headers=auth("admin"))
    conform(created, "/keys")
    key_id = created.json()["id"]
    conform(await a.get("/keys", headers=auth("admin")), "/keys")
    conform(await a.get(f"/keys/{key_id}", headers=auth("admin")), "/keys/{key_id}")
    conform(await a.post(f"/keys/{key_id}:rotate", headers=auth("admin")), "/keys/{key_id}:rotate")
    conform(await a.delete(f"/keys/{key_id}", headers=auth("admin")), "/keys/{key_id}")
    conform(await a.get("/keys/000000000000", headers=auth("admin")), "/keys/{key_id}")
    conform(await a.post("/keys", json={"user": ""}, headers=auth("admin")), "/keys")
    conform(await a.get("/keys", headers=auth("alice")), "/keys")


async def test_an_admin_makes_keys_for_itself_and_new_service_users_only(
    make_app: AppFactory, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant admin cannot mint a key that reads another user's data: only the operator
    grants ``impersonate``, and its use is on the record."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("GATEWAY_API_KEY_SECRET", SECRET)
    ops = await asyncio.to_thread(_cli, "create", "--tenant", "t1", "--user", "ops")
    boss = {"tenant": "t1", "user": "boss", "roles": ["admin", "impersonate"]}
    keys = orjson.dumps({**API_KEYS, "key-boss": boss}).decode()
    async with make_app(api_keys=keys, api_key_secret=SECRET) as gw:
        task = await send_task(gw, "x", headers=auth("alice"))
        admin = auth("admin")
        # Users who exist: a static key's, one the operator made a key for, a token's.
        for user in ("alice", "ops", "jwt:0123456789ab:alice"):
            r = await gw.post("/keys", json={"user": user}, headers=admin)
            assert r.status_code == 403 and r.json()["error"] == "ForbiddenError", user
        # A rotation hands over a key for the same user: the same rule.
        assert (await gw.post(f"/keys/{ops['id']}:rotate", headers=admin)).status_code == 403
        # For itself, and for a new service user (which stays the admins' to manage).
        own = await gw.post("/keys", json={}, headers=admin)
        assert own.status_code == 201 and own.json()["user"] == "root"
        svc = (await gw.post("/keys", json={"user": "svc-ehr"}, headers=admin)).json()
        assert (await gw.post("/keys", json={"user": "svc-ehr"}, headers=admin)).status_code == 201
        assert (await gw.post(f"/keys/{svc['id']}:rotate", headers=admin)).status_code == 201
        # No role its maker lacks, and never impersonate over HTTP.
        for roles in (["impersonate"], ["auditor"]):
            r = await gw.post("/keys", json={"user": "svc-2", "roles": roles}, headers=admin)
            assert r.status_code == 403, roles
        # The operator's impersonate role acts for alice, and the trail says so; keys made
        # for oneself or a service user name no one else.
        r = await gw.post("/keys", json={"user": "alice"}, headers=auth("boss"))
        assert r.status_code == 201, r.text
        made = r.json()
        assert (
            await gw.get(f"/v1/tasks/{task['id']}", headers=bearer(made["key"]))
        ).status_code == 200

        async def recorded() -> list[dict[str, Any]]:
            params = {"operation": "create_key", "user": "boss"}
            items: list[dict[str, Any]] = (
                await gw.get("/audit", params=params, headers=admin)
            ).json()["items"]
            return items

        (entry,) = await until(recorded, what="the impersonation's audit entry")
        assert (entry["user"], entry["actingFor"], entry["keyId"]) == ("boss", "alice", made["id"])
        mine = (await gw.get("/audit", params={"user": "root"}, headers=admin)).json()["items"]
        assert mine and not [e for e in mine if "actingFor" in e]


async def test_a_user_with_data_is_not_a_new_service_user(make_app: AppFactory) -> None:
    """A user whose static key is gone (or a token user from before users were namespaced)
    still owns their contexts: no admin key may be made for them over HTTP."""
    gone = {"tenant": "t1", "user": "gone"}
    with_gone = orjson.dumps({**API_KEYS, "key-gone": gone}).decode()
    async with make_app(api_keys=with_gone, api_key_secret=SECRET) as before:
        await send_task(before, "x", headers=auth("gone"))
    async with make_app(api_keys=KEYS, api_key_secret=SECRET) as gw:
        r = await gw.post("/keys", json={"user": "gone"}, headers=auth("admin"))
        assert r.status_code == 403 and r.json()["error"] == "ForbiddenError"
        fresh = await gw.post("/keys", json={"user": "never-seen"}, headers=auth("admin"))
        assert fresh.status_code == 201
