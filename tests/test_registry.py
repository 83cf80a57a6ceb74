"""The agent registry: CRUD, admin writes, tenant isolation, cards, secrets, ephemeral
agents, and the outbound allowlist."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.outbound import Allowlist, OutboundRefused
from gateway.store.keys import TenantAgentKeys
from tests.a2a_schema import assert_a2a
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, message
from tests.openai_server import ChatServer
from tests.waiting import WAIT_SECONDS, until

SECRET = "sk-very-secret-value-123"
ALLOW = "127.0.0.1:*"


@pytest.fixture
async def gw(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app(
        api_keys=orjson.dumps(API_KEYS).decode(), outbound_allowlist=ALLOW, log_requests=True
    ) as c:
        yield c


def openai_spec(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "Discharge summariser",
        "description": "Summarises a stay for the discharge letter.",
        "systemPrompt": "You write concise discharge summaries.",
        "type": "openai",
        "config": {"baseUrl": "http://127.0.0.1:9/v1", "model": "m", "apiKey": SECRET},
        "skills": [{"id": "summarise", "name": "Summarise", "tags": ["clinical"]}],
    }
    spec.update(overrides)
    return spec


async def register(c: httpx.AsyncClient, spec: dict[str, Any], **params: str) -> dict[str, Any]:
    r = await c.post("/agents", json=spec, headers=auth("admin"), params=params)
    assert r.status_code == 201, r.text
    assert r.headers["location"] == f"/agents/{r.json()['id']}"
    view: dict[str, Any] = r.json()
    return view


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


async def test_api_key_from_the_environment(
    gw: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "AGENT_SECRET_TEST_LLM_KEY"
    config = {"baseUrl": "http://127.0.0.1:9/v1", "model": "m", "apiKeyEnv": name}
    r = await gw.post("/agents", json=openai_spec(config=config), headers=auth("admin"))
    assert r.status_code == 400 and r.json()["data"]["errors"][0]["field"] == "config.apiKeyEnv"
    monkeypatch.setenv(name, "from-env")
    view = await register(gw, openai_spec(config=config))
    assert view["config"]["apiKeyEnv"] == name and "apiKeySet" not in view["config"]
    both = {**config, "apiKey": "x"}
    r = await gw.post("/agents", json=openai_spec(config=both), headers=auth("admin"))
    assert r.status_code == 400


# Variables of the gateway's own, or not allowed: each is set, and none may be named.
REFUSED_ENV = {
    "GATEWAY_API_KEYS": "tenant-1-admin-key",  # a setting, even when the operator lists it
    "gateway_api_key_secret": "hmac-secret-lower-case",  # settings are read in any case
    "REDIS_URL": "redis://:pw@127.0.0.1:1",
    "REDIS_PASSWORD": "redis-password",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=otel-token",
    "GATEWAY_NOT_A_SETTING_YET": "reserved-prefix",
    "UNLISTED_SECRET": "not-listed",
}


async def test_api_key_env_names_only_variables_the_operator_allows(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in REFUSED_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AGENT_SECRET_LLM", "prefixed")
    monkeypatch.setenv("LISTED_LLM_KEY", "listed")
    async with make_app(
        api_keys=orjson.dumps(API_KEYS).decode(),
        outbound_allowlist=ALLOW,
        agent_key_env_names="LISTED_LLM_KEY,GATEWAY_API_KEYS,REDIS_URL",
    ) as gw:

        async def answer(name: str) -> httpx.Response:
            config = {"baseUrl": "http://127.0.0.1:9/v1", "model": "m", "apiKeyEnv": name}
            return await gw.post("/agents", json=openai_spec(config=config), headers=auth("admin"))

        unset = await answer("AGENT_SECRET_NOT_SET")
        assert unset.status_code == 400
        for name in REFUSED_ENV:
            refused = await answer(name)
            # Refused exactly like an unset name: nothing tells whether the variable exists.
            assert (refused.status_code, refused.json()) == (400, unset.json()), name
            assert REFUSED_ENV[name] not in refused.text
        assert (await answer("AGENT_SECRET_LLM")).status_code == 201
        assert (await answer("LISTED_LLM_KEY")).status_code == 201
        ids = [a["id"] for a in (await gw.get("/agents", headers=auth("admin"))).json()["items"]]
        assert len(ids) == 3  # echo and the two allowed


async def test_a_stored_entry_naming_a_refused_variable_gets_no_key(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry written before names were checked, naming a secret of the gateway: its run
    sends nothing, and fails for want of a key."""
    chat = ChatServer().start()
    try:
        monkeypatch.setenv("GATEWAY_API_KEYS_COPY", "tenant-1-admin-key")
        async with make_app(
            api_keys=orjson.dumps(API_KEYS).decode(),
            outbound_allowlist=f"127.0.0.1:{chat.port}",
            agent_cache_seconds=0,
        ) as gw:
            stamp = "2026-01-01T00:00:00Z"
            config = {"baseUrl": chat.url, "model": chat.model, "maxRetries": 0,
                      "apiKeyEnv": "GATEWAY_API_KEYS_COPY"}  # fmt: skip
            entry = {"id": "legacy", "name": "Legacy", "description": "", "systemPrompt": "",
                     "type": "openai", "config": config, "skills": [],
                     "createdAt": stamp, "updatedAt": stamp}  # fmt: skip
            store = gw.app.state.runtime.agents.store  # type: ignore[attr-defined]
            assert await store.create("t1", "legacy", orjson.dumps(entry), False)
            task = (
                await gw.post(
                    "/agents/legacy/v1/message:send",
                    json={"message": message("hi")},
                    headers=auth("alice"),
                )
            ).json()["task"]
            assert task["status"]["state"] == "failed"
        assert chat.auth == []  # the model endpoint was never called, let alone given the key
    finally:
        chat.stop()


async def test_the_sdk_takes_nothing_from_the_gateways_environment(
    make_app: AppFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The openai SDK reads OPENAI_* variables of its own; none of them reaches the URL a
    tenant registered."""
    leaks = {
        "OPENAI_ORG_ID": "org-of-the-operator",
        "OPENAI_PROJECT_ID": "proj-of-the-operator",
        "OPENAI_CUSTOM_HEADERS": "X-Operator-Token: operator-token",
        "OPENAI_ADMIN_KEY": "sk-admin-of-the-operator",
    }
    for name, value in leaks.items():
        monkeypatch.setenv(name, value)
    chat = ChatServer().start()
    try:
        async with make_app(
            api_keys=orjson.dumps(API_KEYS).decode(), outbound_allowlist=f"127.0.0.1:{chat.port}"
        ) as gw:
            config = {"baseUrl": chat.url, "model": chat.model, "apiKey": "sk-tenant",
                      "maxRetries": 0}  # fmt: skip
            await register(gw, openai_spec(id="llm", config=config))
            r = await gw.post(
                "/agents/llm/v1/message:send",
                json={"message": message("hi")},
                headers=auth("alice"),
            )
            assert r.json()["task"]["status"]["state"] == "completed", r.text
        (sent,) = chat.request_headers
        assert sent["authorization"] == "Bearer sk-tenant"
        seen = orjson.dumps(sent).decode()
        assert not [v for v in leaks.values() if v.split(": ")[-1] in seen], sent
    finally:
        chat.stop()
        assert chat.errors == []


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"name": "x", "type": "openai", "config": {"model": "m"}}, "config.baseUrl"),
        ({"name": "x", "type": "openai", "config": {"baseUrl": "http://127.0.0.1:9", "model": "m",
                                                     "temperature": 9}}, "config.temperature"),
        ({"name": "x", "type": "robot"}, "type"),
        ({"name": "", "type": "echo"}, "name"),
        ({"name": "x", "type": "echo", "id": "Bad Id"}, "id"),
        ({"name": "x", "type": "echo", "config": {"memory": {"topK": 99}}}, "config"),
        ({"name": "x", "type": "echo", "unknown": 1}, "unknown"),
        ({"name": "x", "type": "a2a-remote", "config": {}}, "config.cardUrl"),
    ],
)  # fmt: skip
async def test_bad_entries_get_400_naming_the_field(
    gw: httpx.AsyncClient, spec: dict[str, Any], field: str
) -> None:
    r = await gw.post("/agents", json=spec, headers=auth("admin"))
    assert r.status_code == 400, r.text
    assert r.json()["error"] == "InvalidParamsError"
    assert any(e["field"].startswith(field) for e in r.json()["data"]["errors"]), r.json()


async def test_registration_checks_the_allowlist(gw: httpx.AsyncClient) -> None:
    for url in ("http://10.1.2.3/v1", "http://internal.hospital/v1", "file:///etc/passwd",
                "http://user:pw@127.0.0.1:9/v1"):  # fmt: skip
        config = {"baseUrl": url, "model": "m"}
        r = await gw.post("/agents", json=openai_spec(config=config), headers=auth("admin"))
        assert r.status_code == 400, url
        assert r.json()["data"]["errors"][0]["field"] == "config.baseUrl"


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


async def test_allowlist_rules() -> None:
    allow = Allowlist(["*.example.org", "10.0.0.0/8:8000", "localhost:11434", "*.0.0.1"])
    allow.check_name("https://api.example.org/v1")
    allow.check_name("http://10.2.3.4:8000/v1")
    with pytest.raises(OutboundRefused):
        allow.check_name("http://10.2.3.4:9000/v1")
    with pytest.raises(OutboundRefused):
        allow.check_name("http://example.org.evil.com/v1")
    await allow.check("http://localhost:11434/v1")  # named exactly: trusted where it resolves
    await allow.check("http://10.2.3.4:8000/v1")  # an allowed network
    with pytest.raises(OutboundRefused, match="non-public"):
        await allow.check("http://127.0.0.1:80/v1")  # a wildcard may not lead to loopback
    with pytest.raises(OutboundRefused):
        await allow.check("http://localhost:8080/v1")
    empty = Allowlist([], ["http://embedder.internal:8080/v1", None])
    empty.check_name("http://embedder.internal:8080/v1")
    with pytest.raises(OutboundRefused):
        empty.check_name("http://embedder.internal:9090/v1")


async def test_a_wildcard_name_resolving_inward_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DNS says a public-looking name now points into the private network: refused at call
    time although it passed registration."""
    allow = Allowlist(["*.models.example"])
    allow.check_name("https://llm.models.example/v1")

    async def resolve(host: str, port: int, **kw: Any) -> list[Any]:
        return [(2, 1, 6, "", ("10.20.30.40", port))]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", resolve)
    with pytest.raises(OutboundRefused, match="non-public"):
        await allow.check("https://llm.models.example/v1")
