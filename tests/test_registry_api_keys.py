"""The agent registry's API keys from the environment: only variables the operator allows
may be named, a stored entry naming a refused one gets no key, and the SDK takes nothing from
the gateway's environment."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.conftest import API_KEYS, AppFactory, auth, message
from tests.openai_server import ChatServer
from tests.registry_gateway import ALLOW, openai_spec, register
from tests.registry_gateway import gw as gw


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
