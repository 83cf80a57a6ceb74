"""Streaming tests' shared parts: the gateway served over real HTTP in this process, the
requests of a streaming send on each binding, and readings of the events received."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import API_KEYS, auth, message
from tests.sse import Sse, served_gateway

TEXT = "Patient stable; continue current plan and review in the morning."


def echo(chunks: int, delay_ms: int, **more: Any) -> dict[str, Any]:
    return {"echo": {"chunks": chunks, "delayMs": delay_ms, **more}}


@pytest.fixture
async def gw(redis_url: str) -> AsyncIterator[httpx.AsyncClient]:
    keys = orjson.dumps(API_KEYS).decode()
    async with (
        served_gateway(redis_url, api_keys=keys, sse_keepalive_seconds=0.3) as base,
        httpx.AsyncClient(base_url=base, timeout=30, headers=auth("alice")) as c,
    ):
        yield c


def rpc(method: str, params: dict[str, Any], request_id: Any = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def v1_message(text: str, metadata: dict[str, Any]) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}],
            "metadata": metadata}  # fmt: skip


def request_on(binding: str, text: str, metadata: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    canonical = {"message": message(text, metadata=metadata)}
    if binding == "rest":
        return "/v1/message:stream", canonical
    if binding == "jsonrpc-0.3":
        return "/", rpc("message/stream", canonical)
    if binding == "rest-0.3":
        proto = {"messageId": str(uuid.uuid4()), "role": "ROLE_USER",
                 "content": [{"text": text}], "metadata": metadata}  # fmt: skip
        return "/a2a/v1/message:stream", {"request": proto}
    if binding == "rest-1.0":
        return "/a2a/message:stream", {"message": v1_message(text, metadata)}
    return "/", rpc("SendStreamingMessage", {"message": v1_message(text, metadata)})


def normal(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(task | status | artifact, the event) whatever the binding's shape."""
    if data.get("jsonrpc"):
        assert "error" not in data, data
        data = data["result"]
    kinds = {"task": "task", "status-update": "status", "artifact-update": "artifact"}
    if "kind" in data:
        return kinds[data["kind"]], data
    ((key, payload),) = data.items()
    return {"task": "task", "statusUpdate": "status", "artifactUpdate": "artifact"}[key], payload


def state(kind: str, payload: dict[str, Any]) -> str:
    raw: str = payload["status"]["state"]
    return raw.removeprefix("TASK_STATE_").lower().replace("_", "-")


def streamed_text(received: list[tuple[str, dict[str, Any]]], name: str = "echo-stream") -> str:
    """The text of the named artifact as a client builds it from the events it got: from
    the task as it stood when the stream began (on a busy host the run may already have
    streamed its first chunks), then each chunk (``append`` adds, otherwise the artifact
    starts again)."""
    text = ""
    for kind, payload in received:
        if kind == "task":
            for artifact in payload.get("artifacts") or []:
                if artifact.get("name") == name:
                    text = "".join(p.get("text", "") for p in artifact["parts"])
        if kind == "artifact" and payload["artifact"].get("name") == name:
            pieces = "".join(p.get("text", "") for p in payload["artifact"]["parts"])
            text = text + pieces if payload.get("append") else pieces
    return text


async def until_chunks(stream: AsyncIterator[Sse], n: int) -> list[Sse]:
    seen: list[Sse] = []
    async for e in stream:
        if e.comment is not None:
            continue
        seen.append(e)
        if sum(1 for x in seen if normal(x.data)[0] == "artifact") >= n:
            return seen
    raise AssertionError("the stream ended early")
