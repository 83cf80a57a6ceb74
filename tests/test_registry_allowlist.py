"""The agent registry's checks of an entry: bad entries get a 400 naming the field, and the
outbound allowlist is checked at registration, by its rules, and against wildcard names
resolving inward."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from gateway.outbound import Allowlist, OutboundRefused
from tests.conftest import auth
from tests.registry_gateway import gw as gw
from tests.registry_gateway import openai_spec


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
