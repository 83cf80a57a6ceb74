"""A gateway serving the `openai` agent against an OpenAI-compatible test server that
validates every request and replies from a script, and the sends the agent's tests make."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import API_KEYS, AppFactory, auth, send_task
from tests.openai_server import ChatServer

SYSTEM = "You are a careful clinical assistant."


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer().start()
    yield server
    server.stop()
    assert server.errors == []


@pytest.fixture
def gateway(make_app: AppFactory, chat: ChatServer) -> Any:
    @asynccontextmanager
    async def build(config: dict[str, Any] | None = None, **settings: Any) -> AsyncIterator[Any]:
        values: dict[str, Any] = {
            "api_keys": orjson.dumps(API_KEYS).decode(),
            "outbound_allowlist": f"127.0.0.1:{chat.port}",
        }
        values.update(settings)
        async with make_app(**values) as c:
            spec = {
                "id": "llm",
                "name": "Assistant",
                "systemPrompt": SYSTEM,
                "type": "openai",
                "config": {"baseUrl": chat.url, "model": chat.model, "apiKey": "sk-test",
                           "maxRetries": 0, **(config or {})},
            }  # fmt: skip
            r = await c.post("/agents", json=spec, headers=auth("admin"))
            assert r.status_code == 201, r.text
            yield c

    return build


async def send(c: httpx.AsyncClient, *parts: Any, **fields: Any) -> dict[str, Any]:
    task: dict[str, Any] = await send_task(c, *parts, agent="llm", headers=auth("alice"), **fields)
    return task


def text_of(task: dict[str, Any]) -> str:
    return str(task["artifacts"][0]["parts"][0]["text"])
