"""What the runner hands an agent: its message, the context window on demand, references."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from gateway.agents.base import AgentRequest, AgentUpdate, ArtifactUpdate, StatusUpdate
from tests.agents import TestAgent
from tests.conftest import AppFactory, message


class HistoryProbe(TestAgent):
    """Reports the texts of the context window it loads, and the references it was given."""

    id = "probe"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        history = await request.history.load()
        texts = [p.get("text") for m in history for p in m["parts"] if p["kind"] == "text"]
        refs = [
            {"id": t["id"], "state": t["status"]["state"], "artifacts": len(t.get("artifacts", []))}
            for t in request.referenced_tasks
        ]
        report: dict[str, Any] = {"count": request.history.count, "texts": texts, "refs": refs}
        yield ArtifactUpdate([{"kind": "data", "data": report}])
        yield StatusUpdate("completed")


async def test_window_of_prior_messages_loads_on_demand(make_app: AppFactory) -> None:
    async with make_app(agents=[HistoryProbe()], agent_context_messages=3) as c:
        first = await c.post("/v1/message:send", json={"message": message("one")})
        cid = first.json()["task"]["contextId"]
        await c.post("/v1/message:send", json={"message": message("two", contextId=cid)})
        r = await c.post(
            "/agents/probe/v1/message:send",
            json={
                "message": message(
                    "three", contextId=cid, referenceTaskIds=[first.json()["task"]["id"]]
                )
            },
        )
        report = r.json()["task"]["artifacts"][0]["parts"][0]["data"]
    # echo turns: one, echo(one), two, echo(two); the window keeps the last 3
    assert report["count"] == 3
    assert report["texts"] == ["one", "two", "two"]
    assert report["refs"] == [
        {"id": first.json()["task"]["id"], "state": "completed", "artifacts": 1}
    ]


async def test_agent_crash_fails_the_task_safely(make_app: AppFactory) -> None:
    class Broken(HistoryProbe):
        id = "broken"

        async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
            raise RuntimeError("secret patient detail")
            yield StatusUpdate("completed")

    async with make_app(agents=[Broken()]) as c:
        r = await c.post("/agents/broken/v1/message:send", json={"message": message("x")})
    task = r.json()["task"]
    assert task["status"]["state"] == "failed"
    assert "secret" not in r.text
    assert (
        task["status"]["message"]["parts"][0]["text"]
        == "The agent failed while processing the task."
    )
