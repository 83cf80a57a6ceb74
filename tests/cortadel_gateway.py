"""A keyed gateway wired to the Cortadel stand-in (``tests/cortadel_server.py``), the
agents the long-term memory tests send to, the user ids of a user's subjects, and the
helpers that read what recall, store and scrub did."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Any, ClassVar

import httpx
import orjson
import pytest

from gateway.agents.base import (
    AgentRequest,
    AgentUpdate,
    ArtifactUpdate,
    ReplyUpdate,
    StatusUpdate,
)
from gateway.longterm.render import cortadel_user_id
from gateway.options.longterm import CortadelSettings
from tests.agents import TestAgent
from tests.conftest import API_KEYS, AppFactory, auth, send_task
from tests.cortadel_server import CortadelServer
from tests.waiting import until

SEARCH = "/api/v1/memories/search"
STORE = "/api/v1/memories/from-conversation"
MEMORIES = "/api/v1/memories"
ALICE = cortadel_user_id("t1", "alice")


class Reveal(TestAgent):
    """Shows what recall handed it, and replies with the block it was given (an agent that
    leaks its prompt), so the tests can see the block never goes back to Cortadel."""

    id = "reveal"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        memory = request.memory
        seen = {
            "lines": list(request.recalled),
            "block": memory.block if memory else None,
            "injectAs": memory.inject_as if memory else None,
        }
        yield ArtifactUpdate([{"kind": "data", "data": seen}], name="recall")
        leaked = f"{memory.block}\n" if memory else ""
        yield ReplyUpdate([{"kind": "text", "text": f"{leaked}Noted, thank you."}])
        yield StatusUpdate("completed")


class Overridden(Reveal):
    """An agent whose own configuration overrides the deployment's memory options."""

    id = "overridden"
    memory_options: ClassVar[dict[str, Any]] = {
        "topK": 2,
        "searchMode": "vector",
        "injectAs": "instructions",
    }


class Persisting(Reveal):
    """An agent whose blocking sends wait for their turn to be stored."""

    id = "persisting"
    memory_options: ClassVar[dict[str, Any]] = {"awaitPersist": True}


Gateway = Callable[..., Any]


@pytest.fixture
def gateway(make_app: AppFactory, cortadel: CortadelServer) -> Gateway:
    """A keyed gateway wired to the stand-in; keyword arguments are Cortadel settings. Its
    contexts without a subject recall user-wide (``subjectless_recall="user"``), so the
    tests of recall's mechanics need no subject; the tests of scoping set it back."""

    def build(**options: Any) -> Any:
        values: dict[str, Any] = {
            "url": cortadel.url,
            "api_key": "cortadel-key",
            "backoff_max_seconds": 0.3,
            "timeout_seconds": 2.0,
            "subjectless_recall": "user",
        }
        values.update(options)
        return make_app(
            agents=[Reveal(), Overridden(), Persisting()],
            api_keys=orjson.dumps(API_KEYS).decode(),
            cortadel=CortadelSettings(**values),
            job_lease_seconds=2.0,
        )

    return build


# Sends go to the reveal agent as alice unless a test says otherwise.
send_reveal = partial(send_task, agent="reveal", headers=auth("alice"))


def _seen(task: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = task["artifacts"][0]["parts"][0]["data"]
    return data


async def _probed(c: httpx.AsyncClient) -> None:
    """Wait until the gateway's start-up key probe has run."""

    async def ready() -> bool:
        return bool((await c.get("/readyz")).json()["checks"]["cortadel"] != "degraded")

    await until(ready, what="the start-up key probe")


async def _scrub(c: httpx.AsyncClient, context_id: str) -> httpx.Response:
    """Delete one of alice's contexts (which scrubs its memories unless scrub is off)."""
    r = await c.delete(f"/v1/contexts/{context_id}", headers=auth("alice"))
    assert r.status_code == 204
    return r


def _deletes(cortadel: CortadelServer, user_id: str = ALICE) -> list[list[str]]:
    return [
        sorted(c["body"]["memory_ids"])
        for c in cortadel.calls_to(MEMORIES)
        if c["method"] == "DELETE" and c["body"]["user_id"] == user_id
    ]


HIV = "Patient is HIV positive on dolutegravir"


def _uid(subject: str | None = None) -> str:
    return cortadel_user_id("t1", "alice", None, subject)


async def _held(cortadel: CortadelServer, user_id: str, text: str) -> None:
    await until(
        lambda: any(m.text == text for m in cortadel.of_user(user_id)), what=f"{text!r} stored"
    )
