"""Agents for tests, loadable by worker processes through GATEWAY_AGENT_PLUGINS."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from gateway.agents.base import (
    AgentRequest,
    AgentSkill,
    AgentUpdate,
    ArtifactChunk,
    ArtifactUpdate,
    ReplyUpdate,
    StatusUpdate,
)
from gateway.errors import StoreUnavailableError


class TestAgent:
    """The card facts every test agent shares; subclasses set ``id`` and ``run``."""

    __test__ = False  # not a pytest test class

    id = "test"
    name = "Test"
    description = "An agent for tests"
    version = "1"
    input_modes: Sequence[str] = ("text/plain",)
    output_modes: Sequence[str] = ("text/plain",)
    skills: Sequence[AgentSkill] = ()


class Partial(TestAgent):
    """Writes half its answer, pauses for ``metadata.sleep`` seconds, then finishes.

    With ``metadata.once`` (a file path) it pauses only the first time it runs that
    message: a retried attempt then finishes at once."""

    id = "partial"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        meta = request.message.get("metadata") or {}
        pause = float(meta.get("sleep", 0))
        if meta.get("once") and not _first_time(Path(meta["once"])):
            pause = 0
        yield ArtifactUpdate([{"kind": "text", "text": "first half"}], name="partial")
        yield ReplyUpdate([{"kind": "text", "text": "working on it"}])
        yield StatusUpdate("working", "halfway")
        await asyncio.sleep(pause)
        yield ArtifactUpdate([{"kind": "text", "text": "second half"}], name="final")
        yield ReplyUpdate([{"kind": "text", "text": "done"}])
        yield StatusUpdate("completed")


def _first_time(flag: Path) -> bool:
    """True the first time ``flag`` is seen (the file records it, across processes)."""
    try:
        flag.touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


class StoreFlaky(TestAgent):
    """Fails the way a run fails when Redis drops mid-run: the job must be retried."""

    id = "flaky"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        raise StoreUnavailableError()
        yield StatusUpdate("completed")


class Gated(TestAgent):
    """Waits for the file ``metadata.gate`` to exist (a test opens it once its readers
    follow the task), then streams ``metadata.chunks`` pieces of ``metadata.size`` bytes
    as one artifact, and completes."""

    id = "gated"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        meta = request.message.get("metadata") or {}
        gate = meta["gate"]
        for _ in range(6000):  # at most a minute
            if os.path.exists(gate):  # noqa: ASYNC240 (a stat, once per poll)
                break
            await asyncio.sleep(0.01)
        chunks, size = int(meta.get("chunks", 1)), int(meta.get("size", 10))
        for n in range(chunks):
            piece = [{"kind": "text", "text": chr(ord("a") + n % 26) * size}]
            yield ArtifactChunk(piece, "gated", n > 0, n == chunks - 1)
        yield StatusUpdate("completed")
