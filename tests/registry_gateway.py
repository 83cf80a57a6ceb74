"""A gateway with an admin key and an outbound allowlist, for the agent registry's tests,
and the OpenAI agent entries they register."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import API_KEYS, AppFactory, auth

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
