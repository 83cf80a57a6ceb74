"""The agent registry: CRUD, generated ids and conflicts, admin writes, tenant isolation,
generated cards, secrets that never leave, ephemeral agents that expire like contexts, and a
deleted agent's queued task."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import orjson
import pytest

from gateway.store.keys import TenantAgentKeys
from tests.a2a_schema import assert_a2a
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, message
from tests.registry_gateway import SECRET, openai_spec, register
from tests.registry_gateway import gw as gw
from tests.waiting import WAIT_SECONDS, until


async def test_crud_round_trip(gw: httpx.AsyncClient) -> None:
    created = await register(gw, openai_spec(id="summariser"))
    assert created["id"] == "summariser" and created["revision"] == 1
    assert created["config"]["apiKeySet"] is True and "apiKey" not in created["config"]
    listed = (await gw.get("/agents", headers=auth("alice"))).json()
    assert [a["id"] for a in listed["items"]] == ["echo", "summariser"]
    assert listed["items"][0]["builtIn"] is True
    r = await gw.patch(
        "/agents/summariser",
        json={"description": "Shorter.", "config": {"temperature": 0.2}},
        headers=auth("admin"),
    )
    assert r.status_code == 200, r.text
    changed = r.json()
    assert changed["revision"] == 2 and changed["description"] == "Shorter."
    assert changed["config"]["temperature"] == 0.2 and changed["config"]["apiKeySet"] is True
    read = (await gw.get("/agents/summariser", headers=auth("bob"))).json()
    assert read == changed
    assert (await gw.delete("/agents/summariser", headers=auth("admin"))).status_code == 204
    assert (await gw.get("/agents/summariser", headers=auth("alice"))).status_code == 404
    assert (await gw.delete("/agents/summariser", headers=auth("admin"))).status_code == 404


async def test_generated_ids_and_conflicts(gw: httpx.AsyncClient) -> None:
    created = await register(gw, openai_spec(name="Coding Assistant!"))
    assert created["id"].startswith("coding-assistant-")
    r = await gw.post("/agents", json=openai_spec(id=created["id"]), headers=auth("admin"))
    assert r.status_code == 409 and r.json()["error"] == "AgentExistsError"
    r = await gw.post("/agents", json=openai_spec(id="echo"), headers=auth("admin"))
    assert r.status_code == 409
    for call in (gw.delete("/agents/echo", headers=auth("admin")),
                 gw.patch("/agents/echo", json={"name": "x"}, headers=auth("admin"))):  # fmt: skip
        r = await call
        assert r.status_code == 409 and r.json()["error"] == "AgentReadOnlyError"


async def test_writes_need_an_admin_key(gw: httpx.AsyncClient) -> None:
    r = await gw.post("/agents", json=openai_spec(), headers=auth("alice"))
    assert r.status_code == 403 and r.json()["error"] == "ForbiddenError"
    await register(gw, openai_spec(id="a1"))
    assert (
        await gw.patch("/agents/a1", json={"name": "x"}, headers=auth("bob"))
    ).status_code == 403
    assert (await gw.delete("/agents/a1", headers=auth("alice"))).status_code == 403
    assert (await gw.get("/agents/a1", headers=auth("alice"))).status_code == 200


async def test_agents_are_per_tenant(gw: httpx.AsyncClient) -> None:
    await register(gw, {"name": "Triage", "type": "echo", "id": "triage"})
    # carol is in tenant t2: t1's agent does not exist for her, on any path
    assert (await gw.get("/agents/triage", headers=auth("carol"))).status_code == 404
    ids = [a["id"] for a in (await gw.get("/agents", headers=auth("carol"))).json()["items"]]
    assert ids == ["echo"]
    body = {"message": message("hello")}
    r = await gw.post("/agents/triage/v1/message:send", json=body, headers=auth("carol"))
    assert r.status_code == 404 and r.json()["error"] == "AgentNotFoundError"
    r = await gw.get("/agents/triage/.well-known/agent-card.json", headers=auth("carol"))
    assert r.status_code == 404
    r = await gw.post("/agents/triage/v1/message:send", json=body, headers=auth("alice"))
    assert r.status_code == 200 and r.json()["task"]["status"]["state"] == "completed"
    r = await gw.post("/agents/nobody/v1/message:send", json=body, headers=auth("alice"))
    assert r.status_code == 404 and r.json()["error"] == "AgentNotFoundError"


async def test_cards_are_generated_and_valid(gw: httpx.AsyncClient) -> None:
    await register(gw, openai_spec(id="summariser"))
    await register(gw, {"name": "Specialist", "type": "a2a-remote", "id": "remote",
                        "config": {"cardUrl": "http://127.0.0.1:9/.well-known/agent-card.json"}})  # fmt: skip
    for agent_id in ("summariser", "remote"):
        r = await gw.get(f"/agents/{agent_id}/.well-known/agent-card.json", headers=auth("bob"))
        assert r.status_code == 200, r.text
        card = r.json()
        assert_a2a("AgentCard", card)
        assert card["url"] == f"http://gw/agents/{agent_id}"
        assert card["capabilities"] == {
            "streaming": True,
            "pushNotifications": True,
            "stateTransitionHistory": False,
        }
        assert "bearer" in card["securitySchemes"] and card["version"] == "1"
    card = (await gw.get("/agents/summariser/agent-card.json", headers=auth("bob"))).json()
    assert card["name"] == "Discharge summariser"
    assert card["skills"][0]["id"] == "summarise"
    # anonymous callers see built-in cards only
    assert (await gw.get("/agents/summariser/agent-card.json")).status_code == 404
    assert (await gw.get("/agents/echo/agent-card.json")).status_code == 200


async def test_secrets_never_leave(
    gw: httpx.AsyncClient, redis: RawRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    created = await register(gw, openai_spec(id="s"))
    responses = [
        created,
        (await gw.get("/agents", headers=auth("alice"))).json(),
        (await gw.get("/agents/s", headers=auth("alice"))).json(),
        (await gw.patch("/agents/s", json={"name": "T"}, headers=auth("admin"))).json(),
        (await gw.get("/agents/s/agent-card.json", headers=auth("alice"))).json(),
        (
            await gw.post(
                "/agents/s/v1/message:send", json={"message": message("hi")}, headers=auth("alice")
            )
        ).json(),
    ]
    assert all(SECRET not in orjson.dumps(r).decode() for r in responses)
    assert SECRET not in caplog.text
    bad = await gw.post(
        "/agents", json=openai_spec(config={"apiKey": SECRET}), headers=auth("admin")
    )
    assert bad.status_code == 400 and SECRET not in bad.text  # validation never echoes input


async def test_ephemeral_agents_expire_like_contexts(make_app: AppFactory, redis: RawRedis) -> None:
    """An ephemeral agent's entry takes the contexts' TTL, a read slides it, and once the TTL
    has passed without a read the agent is gone. The entry's TTL is watched in Redis (where
    a raw read does not slide it), so no step depends on how long a request takes: the read
    comes when half the TTL is left, and the expiry is awaited, not slept through."""
    ttl_ms = 4000
    async with make_app(
        api_keys=orjson.dumps(API_KEYS).decode(),
        context_ttl_seconds=ttl_ms // 1000,
        agent_cache_seconds=0,
    ) as c:
        view = await register(c, {"name": "Scratch", "type": "echo"}, ephemeral="true")
        assert view["ephemeral"] is True
        entry = TenantAgentKeys.of("t1").agent(view["id"])
        assert 0 < await redis.pttl(entry) <= ttl_ms

        async def half_spent() -> int | None:
            left = int(await redis.pttl(entry))
            assert left > 0, f"the entry expired before it was read (PTTL {left})"
            return left if left <= ttl_ms // 2 else None

        left = await until(half_spent, what="half the ephemeral agent's TTL to pass")
        assert (await c.get(f"/agents/{view['id']}", headers=auth("alice"))).status_code == 200
        slid = await redis.pttl(entry)  # only a new expiry raises it: the read slid it
        assert left < slid <= ttl_ms, f"PTTL {left} ms before the read, {slid} ms after"

        async def expired() -> bool:
            return not await redis.exists(entry)

        await until(
            expired, timeout=ttl_ms / 1000 + WAIT_SECONDS, what="the unread agent to expire"
        )
        assert (await c.get(f"/agents/{view['id']}", headers=auth("alice"))).status_code == 404
        ids = [a["id"] for a in (await c.get("/agents", headers=auth("alice"))).json()["items"]]
        assert ids == ["echo"]
        r = await c.post("/agents", json={"name": "x", "type": "echo"}, headers=auth("admin"),
                         params={"ephemeral": "maybe"})  # fmt: skip
        assert r.status_code == 400


async def test_a_deleted_agent_fails_its_queued_task(make_app: AppFactory) -> None:
    keys = orjson.dumps(API_KEYS).decode()
    async with make_app(api_keys=keys, workers=False, blocking_timeout_seconds=0.2) as c:
        await register(c, {"name": "Gone soon", "type": "echo", "id": "gone"})
        r = await c.post("/agents/gone/v1/message:send", json={"message": message("x")},
                         headers=auth("alice"))  # fmt: skip
        task = r.json()["task"]
        assert task["status"]["state"] == "submitted"
        assert (await c.delete("/agents/gone", headers=auth("admin"))).status_code == 204
    async with make_app(api_keys=keys, agent_cache_seconds=0) as worker:

        async def ran() -> dict[str, Any] | None:
            got = (await worker.get(f"/v1/tasks/{task['id']}", headers=auth("alice"))).json()
            return None if got["status"]["state"] == "submitted" else got

        got = await until(ran, what="the queued task to be taken up")
    assert got["status"]["state"] == "failed"
    assert "deleted" in got["status"]["message"]["parts"][0]["text"]
