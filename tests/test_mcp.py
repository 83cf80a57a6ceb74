"""search_memory over MCP, with the official SDK's client against a real gateway process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import httpx2
import orjson
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import API_KEYS, auth, message
from tests.processes import serving, slow_process_test


async def _call(base: str, user: str, arguments: dict[str, Any]) -> tuple[list[str], Any]:
    async with (
        httpx2.AsyncClient(headers=auth(user), timeout=30) as http,
        streamable_http_client(f"{base}/mcp", http_client=http) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        tools = [t.name for t in (await session.list_tools()).tools]
        return tools, await session.call_tool("search_memory", arguments)


@slow_process_test
async def test_search_memory_tool_with_the_sdk_client(tmp_path: Path, redis_url: str) -> None:
    keys = orjson.dumps(API_KEYS).decode()
    with serving(tmp_path, REDIS_URL=redis_url, GATEWAY_API_KEYS=keys) as (_, base):
        async with httpx.AsyncClient(base_url=base, headers=auth("alice"), timeout=30) as c:
            first = await c.post(
                "/v1/message:send", json={"message": message("sore throat and fever")}
            )
            cid = first.json()["task"]["contextId"]
            body = {"message": message("blood pressure is normal", contextId=cid)}
            await c.post("/v1/message:send", json=body)
        # consistency=wait: the search finds the messages just sent, once they are embedded
        just_sent = {"contextId": cid, "query": "fever", "topK": 1, "consistency": "wait"}
        tools, result = await _call(base, "alice", just_sent)
        assert tools == ["search_memory"]
        assert not result.is_error
        text = result.content[0].text
        assert text.startswith("1 matching message(s)") and "sore throat and fever" in text
        _, foreign = await _call(base, "bob", {"contextId": cid, "query": "fever"})
        assert foreign.is_error and "Context not found" in foreign.content[0].text
        _, bad = await _call(base, "alice", {"contextId": cid, "query": "fever", "topK": 99})
        assert bad.is_error
        _, words = await _call(base, "alice", {"contextId": cid, "query": "fever", "mode": "text"})
        text = words.content[0].text
        assert not words.is_error and "(text ranking)" in text and "blood pressure" not in text
        _, wrong = await _call(base, "alice", {"contextId": cid, "query": "x", "mode": "fuzzy"})
        assert wrong.is_error and wrong.content[0].text == "Invalid arguments: mode"
        _, unsure = await _call(base, "alice", {"contextId": cid, "query": "x", "consistency": "s"})
        assert unsure.is_error and unsure.content[0].text == "Invalid arguments: consistency"
        async with httpx.AsyncClient() as anonymous:
            r = await anonymous.post(
                f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            )
            assert r.status_code == 401 and r.json()["error"] == "UnauthenticatedError"
