"""Agents for tests, loadable by worker processes through GATEWAY_AGENT_PLUGINS."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

from gateway.agents.base import (
    AgentRequest,
    AgentSkill,
    AgentUpdate,
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
