"""Contexts the context-memory tests fill and search: sends to the echo agent, waiting
until a context is indexed, and a search of it."""

from __future__ import annotations

from functools import partial
from typing import Any

import httpx

from tests.conftest import send_task
from tests.waiting import until

# Sends go to the echo agent at its own base unless a test names another.
send_echo = partial(send_task, agent="echo")


async def _indexed(c: httpx.AsyncClient, cid: str, headers: Any = None) -> dict[str, int]:
    async def done() -> dict[str, int] | None:
        memory: dict[str, int] = (await c.get(f"/v1/contexts/{cid}", headers=headers)).json()[
            "memory"
        ]
        return memory if memory["pending"] == 0 else None

    return await until(done, what=f"context {cid} to be indexed")


async def _indexed_context(c: httpx.AsyncClient, texts: list[str]) -> str:
    """A new context of one echo turn per text, once every message in it is embedded."""
    cid: str = (await send_echo(c, texts[0]))["contextId"]
    for text in texts[1:]:
        await send_echo(c, text, contextId=cid)
    await _indexed(c, cid)
    return cid


async def _search(c: httpx.AsyncClient, cid: str, query: str, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", None)
    return await c.post(f"/v1/contexts/{cid}:search", json={"query": query, **kw}, headers=headers)
