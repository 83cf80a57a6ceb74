"""The built-in ``echo`` agent: replies with what it was given, for testing integrations.

``message.metadata.echo`` may set ``delayMs`` (0–120000), ``steps`` (0–100 intermediate
``working`` updates), ``chunks`` (0–1000: the message's text is first streamed back as an
artifact ``echo-stream`` in that many pieces, the delay spread over them) and
``finalState`` (``completed``, ``input-required``, ``failed``, or ``working`` to stay open
until canceled).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.agents.base import (
    AgentRequest,
    AgentSkill,
    AgentUpdate,
    ArtifactChunk,
    ArtifactUpdate,
    ReplyUpdate,
    StatusUpdate,
)

__all__ = ["EchoAgent"]

_FINAL_TEXT = {
    "input-required": "More input is required to continue.",
    "failed": "The echo agent failed as requested.",
}


class EchoOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    delayMs: int = Field(default=0, ge=0, le=120_000)
    steps: int = Field(default=0, ge=0, le=100)
    chunks: int = Field(default=0, ge=0, le=1000)
    finalState: Literal["completed", "input-required", "failed", "working"] = "completed"


class EchoAgent:
    id: str = "echo"
    name: str = "Echo"
    description: str = (
        "Replies with the text and data it receives, and reports what context it saw."
    )
    version: str = "1.0.0"
    input_modes: Sequence[str] = ("text/plain", "application/json")
    output_modes: Sequence[str] = ("text/plain", "application/json")
    skills: Sequence[AgentSkill] = (
        AgentSkill(
            id="echo",
            name="Echo",
            description="Echoes text and data parts back and reports the context it received.",
            tags=("test", "echo"),
        ),
    )

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        metadata = request.message.get("metadata") or {}
        try:
            options = EchoOptions.model_validate(metadata.get("echo") or {})
        except ValidationError:
            yield StatusUpdate("failed", "Invalid metadata.echo options.")
            return
        pause = options.delayMs / 1000 / (options.steps + options.chunks + 1)
        for step in range(1, options.steps + 1):
            await asyncio.sleep(pause)
            yield StatusUpdate("working", f"Step {step} of {options.steps}.")
        for n, piece in enumerate(_pieces(_text_of(request), options.chunks)):
            await asyncio.sleep(pause)
            last = n == options.chunks - 1
            yield ArtifactChunk([{"kind": "text", "text": piece}], "echo-stream", n > 0, last)
        if pause:
            await asyncio.sleep(pause)
        parts = _echo_parts(request)
        yield ArtifactUpdate(parts, name="echo")
        yield ReplyUpdate(parts)
        yield StatusUpdate(options.finalState, _FINAL_TEXT.get(options.finalState))


def _echo_parts(request: AgentRequest) -> list[dict[str, Any]]:
    kept = [p for p in request.message.get("parts", ()) if p.get("kind") in ("text", "data")]
    report = {
        "historyMessages": request.history.count,
        "referenceTaskIds": [t["id"] for t in request.referenced_tasks],
        "recalled": len(request.recalled),
    }
    return [*kept, {"kind": "data", "data": {"echo": report}}]


def _text_of(request: AgentRequest) -> str:
    return "".join(
        p.get("text", "") for p in request.message.get("parts", ()) if p.get("kind") == "text"
    )


def _pieces(text: str, n: int) -> list[str]:
    """``text`` cut into ``n`` consecutive pieces of near-equal length (some empty when
    the text is shorter than ``n``)."""
    return [text[len(text) * i // n : len(text) * (i + 1) // n] for i in range(n)]
