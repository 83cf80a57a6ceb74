"""An OpenAI-compatible Chat Completions server for tests, on 127.0.0.1.

Each request is checked as the Chat Completions API and its tool-call protocol define
it: the model name, roles, a system message only first, every assistant ``tool_calls``
answered by tool messages with the same ids (and tool messages only there), the last
message from the user or a tool, well-formed tools and response_format. A violation is
a 400 and is recorded in ``errors``, which tests assert empty.

Replies come from ``script`` in order: ``{"content": ...}``, ``{"tool_calls": [(name,
arguments json)]}``, ``{"refusal": ...}``, ``{"status": 429}`` (an error status) or
``{"delay": seconds}`` before the next entry's answer. An empty script answers
``"ok"``.

A request with ``stream: true`` is answered as the API streams: server-sent
``chat.completion.chunk`` objects (the role, the content a word at a time, or the tool
calls, or the refusal; then the finish reason; the usage when ``stream_options`` asks for
it) and ``data: [DONE]``. ``streamed`` records each streamed content piece.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.http_double import ServedDouble

ROLES = {"system", "user", "assistant", "tool"}


def _message_problems(messages: list[Any]) -> list[str]:
    """Roles, system first, and the tool-call protocol: every assistant ``tool_calls`` is
    answered by tool messages with the same ids, and tool messages appear only there."""
    found: list[str] = []
    awaiting: list[str] = []
    for n, m in enumerate(messages):
        role = m.get("role")
        if role not in ROLES:
            found.append(f"message {n}: bad role {role!r}")
        elif role == "tool":
            if not awaiting or m.get("tool_call_id") != awaiting.pop(0):
                found.append(f"message {n}: tool message without its pending tool call")
        elif awaiting:
            found.append(f"message {n}: tool calls {awaiting} were not answered")
            awaiting = []
        if role == "system" and n != 0:
            found.append(f"message {n}: a system message only comes first")
        calls = m.get("tool_calls") if role == "assistant" else None
        if calls:
            awaiting = [c.get("id") for c in calls if c.get("type") == "function" and c.get("id")]
        if (calls and len(awaiting) != len(calls)) or (
            role in ROLES and not calls and not isinstance(m.get("content"), str)
        ):
            found.append(f"message {n}: malformed content or tool call")
    if awaiting:
        found.append(f"tool calls {awaiting} were not answered")
    return found


def problems_of(body: Any, model: str) -> list[str]:
    if not isinstance(body, dict):
        return ["body must be an object"]
    found = [] if body.get("model") == model else [f"unknown model {body.get('model')!r}"]
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return [*found, "messages must be a non-empty list"]
    found += _message_problems(messages)
    if messages[-1].get("role") not in ("user", "tool"):
        found.append("the last message must come from the user or a tool")
    tools = body.get("tools") or ()
    if any(t.get("type") != "function" or not t.get("function", {}).get("name") for t in tools):
        found.append("malformed tool")
    if body.get("stream_options") is not None and body.get("stream") is not True:
        found.append("stream_options is only for streamed requests")
    fmt = body.get("response_format")
    if fmt is not None and fmt.get("type") not in ("json_object", "json_schema", "text"):
        found.append("bad response_format")
    return found


class ChatServer(ServedDouble):
    def __init__(self, model: str = "test-model", prefix: str = "") -> None:
        """Served at ``{prefix}/v1/chat/completions``."""
        self.model, self.prefix = model, prefix
        super().__init__()
        self.requests: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.script: list[dict[str, Any]] = []
        self.auth: list[str | None] = []
        self.request_headers: list[dict[str, str]] = []
        self.streamed: list[str] = []
        route = Route(f"{prefix}/v1/chat/completions", self._chat, methods=["POST"])
        app = Starlette(routes=[route])
        self.serve(app)
        self._calls = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}/v1"

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.auth.append(request.headers.get("authorization"))
        self.request_headers.append(dict(request.headers))
        problems = problems_of(body, self.model)
        if problems:
            self.errors.extend(problems)
            return JSONResponse({"error": {"message": "; ".join(problems)}}, 400)
        step = self.script.pop(0) if self.script else {"content": "ok"}
        if "delay" in step:
            await asyncio.sleep(float(step["delay"]))
            step = self.script.pop(0) if self.script else {"content": "ok"}
        if "status" in step:
            return JSONResponse(
                {"error": {"message": "injected", "type": "server_error"}}, int(step["status"])
            )
        self._calls += 1
        message: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
        finish = "stop"
        if "tool_calls" in step:
            message["tool_calls"] = [
                {"id": f"call_{self._calls}_{n}", "type": "function",
                 "function": {"name": name, "arguments": arguments}}
                for n, (name, arguments) in enumerate(step["tool_calls"])
            ]  # fmt: skip
            finish = "tool_calls"
        if "refusal" in step:
            message["refusal"], message["content"] = step["refusal"], None
        prompt = sum(len(str(m.get("content") or "")) for m in body["messages"]) // 4
        usage = {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7}
        if body.get("stream") is True:
            with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            chunks = self._chunks(message, finish, usage if with_usage else None)
            return StreamingResponse(chunks, media_type="text/event-stream")
        return JSONResponse(
            {
                "id": f"chatcmpl-{self._calls}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )

    async def _chunks(
        self, message: dict[str, Any], finish: str, usage: dict[str, int] | None
    ) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any] | None, reason: str | None = None, **more: Any) -> bytes:
            body = {"id": f"chatcmpl-{self._calls}", "object": "chat.completion.chunk",
                    "created": int(time.time()), "model": self.model, **more}  # fmt: skip
            if delta is not None:
                body["choices"] = [{"index": 0, "delta": delta, "finish_reason": reason}]
            return b"data: " + json.dumps(body).encode() + b"\n\n"

        yield chunk({"role": "assistant", "content": ""})
        for piece in re.findall(r"\S*\s*", message.get("content") or ""):
            if piece:
                self.streamed.append(piece)
                yield chunk({"content": piece})
                await asyncio.sleep(0)
        for n, call in enumerate(message.get("tool_calls") or []):
            yield chunk({"tool_calls": [{"index": n, **call}]})
        if message.get("refusal"):
            yield chunk({"refusal": message["refusal"]})
        yield chunk({}, finish)
        if usage is not None:
            yield chunk(None, choices=[], usage=usage)
        yield b"data: [DONE]\n\n"
