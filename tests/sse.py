"""Reading server-sent events in tests, and an in-process gateway served over real HTTP
(ASGI test transports hand over a response only once it has ended)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
import uvicorn

from gateway.app import create_app
from gateway.embedded_redis import free_port
from gateway.http.server import server_config
from gateway.settings import Settings
from tests.conftest import TEST_KEYRING
from tests.waiting import until


@dataclass
class Sse:
    id: str | None
    data: Any  # the decoded JSON, or None for a comment
    comment: str | None = None


async def events(response: httpx.Response) -> AsyncIterator[Sse]:
    """The events (and comments) of an SSE response, as they arrive."""
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line.startswith(":"):
            yield Sse(None, None, line[1:].strip())
        elif line == "":
            if "data" in fields:
                yield Sse(fields.get("id"), orjson.loads(fields["data"]))
            fields = {}
        else:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


async def collect(response: httpx.Response) -> list[Sse]:
    """Every event until the server ends the stream (comments left out)."""
    return [e async for e in events(response) if e.comment is None]


@asynccontextmanager
async def served_gateway(redis_url: str, **overrides: Any) -> AsyncIterator[str]:
    """A gateway app served by uvicorn on 127.0.0.1 in this event loop, content sealed as
    by default; yields its URL."""
    values: dict[str, Any] = {"redis_url": redis_url, "log_requests": False, "port": free_port(),
                              "encryption_keys": TEST_KEYRING, **overrides}  # fmt: skip
    settings = Settings(**values)
    server = uvicorn.Server(server_config(create_app(settings), settings, log_level="warning"))
    task = asyncio.create_task(server.serve())
    await until(lambda: server.started or task.done(), what="the gateway to serve", every=0.01)
    if task.done():
        task.result()
    try:
        yield f"http://127.0.0.1:{settings.port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
