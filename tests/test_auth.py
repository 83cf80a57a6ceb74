"""API keys, the tenant header, open mode."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import AppFactory, Send, auth


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"X-API-Key": "wrong"},
        {"Authorization": "Basic a2V5"},
    ],
)
async def test_missing_or_wrong_credentials_are_401(
    keyed: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    r = await keyed.get("/v1/contexts", headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert r.json()["error"] == "UnauthenticatedError" and r.json()["code"] == -32020


async def test_bearer_and_x_api_key_both_work(keyed: httpx.AsyncClient, send: Send) -> None:
    task = (await send("x", via=keyed, headers=auth("alice"))).json()["task"]
    r = await keyed.get(f"/v1/tasks/{task['id']}", headers={"X-API-Key": "key-alice"})
    assert r.status_code == 200


async def test_tenant_header_must_match(keyed: httpx.AsyncClient) -> None:
    ok = await keyed.get("/v1/contexts", headers={**auth("alice"), "Tenant-Name": "t1"})
    assert ok.status_code == 200
    r = await keyed.get("/v1/contexts", headers={**auth("alice"), "Tenant-Name": "t2"})
    assert r.status_code == 403
    assert r.json()["error"] == "ForbiddenError"


async def test_public_endpoints_need_no_key(keyed: httpx.AsyncClient) -> None:
    for path in ("/healthz", "/readyz", "/openapi.yaml", "/.well-known/agent-card.json"):
        assert (await keyed.get(path)).status_code == 200, path


async def test_open_mode_serves_the_local_principal(client: httpx.AsyncClient, send: Send) -> None:
    assert (await send("x")).status_code == 200
    r = await client.get("/v1/contexts", headers={"Tenant-Name": "other"})
    assert r.status_code == 403


async def test_open_mode_card_has_no_security(make_app: AppFactory) -> None:
    async with make_app() as c:
        card = (await c.get("/.well-known/agent-card.json")).json()
    assert "securitySchemes" not in card and "security" not in card


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/v1/contexts/agent-card.json"),
        ("GET", "/v1/contexts/agent-card.json"),
        ("GET", "/agents/agent-card.json"),
        ("PATCH", "/agents/agent-card.json"),
        ("DELETE", "/agents/agent-card.json"),
        ("GET", "/v1/tasks/agent-card.json"),
        ("GET", "/agents/echo/v1/tasks/agent-card.json"),
        ("POST", "/v1/contexts/x/.well-known/agent-card.json"),
        ("POST", "/agent-card.json"),
        ("DELETE", "/agents/echo/.well-known/agent-card.json"),
    ],
)
async def test_only_the_card_routes_are_anonymous_and_only_for_get(
    keyed: httpx.AsyncClient, method: str, path: str
) -> None:
    r = await keyed.request(method, path)
    assert r.status_code == 401, r.text
    assert r.json()["error"] == "UnauthenticatedError"


async def test_every_card_route_is_anonymous(keyed: httpx.AsyncClient) -> None:
    for path in (
        "/agent-card.json",
        "/.well-known/agent-card.json",
        "/agents/echo/agent-card.json",
        "/agents/echo/.well-known/agent-card.json",
    ):
        assert (await keyed.get(path)).status_code == 200, path
