"""Agents from configuration (``gateway/agents/plugins.py``): each ``module:Class`` of
``GATEWAY_AGENT_PLUGINS`` is imported by its name when the runtime is built and served like
a built-in agent. The import rule cannot follow a name known only at run time
(``tests/test_layers.py`` lists the loader in ``DYNAMIC``): these tests are its cover."""

from __future__ import annotations

import pytest

from gateway.agents.plugins import load_agents
from gateway.configuration import load_settings
from tests.agents import Gated, Partial
from tests.conftest import AppFactory


def test_the_variable_names_the_agents_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_AGENT_PLUGINS", " tests.agents:Gated, tests.agents:Partial ,")
    settings = load_settings()
    assert settings.agent_plugins == ["tests.agents:Gated", "tests.agents:Partial"]
    agents = load_agents(settings.agent_plugins)
    assert [a.id for a in agents] == [Gated.id, Partial.id]
    assert isinstance(agents[0], Gated) and isinstance(agents[1], Partial)


@pytest.mark.parametrize("path", ["tests.agents", ":Partial", "tests.agents:"])
def test_a_path_without_module_and_class_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="module:Class"):
        load_agents([path])


def test_a_module_or_class_that_is_not_there_fails_the_start() -> None:
    with pytest.raises(ModuleNotFoundError):
        load_agents(["tests.no_such_module:Agent"])
    with pytest.raises(AttributeError):
        load_agents(["tests.agents:NoSuchAgent"])


async def test_a_plugin_is_listed_and_runs(make_app: AppFactory) -> None:
    async with make_app(agent_plugins="tests.agents:Partial") as c:
        listed = (await c.get("/agents")).json()["items"]
        assert {"id": "partial", "builtIn": True}.items() <= listed[-1].items()
        message = {"role": "ROLE_USER", "messageId": "plugin-1", "parts": [{"text": "go"}]}
        r = await c.post("/agents/partial/a2a/message:send", json={"message": message})
        assert r.status_code == 200, r.text
        task = r.json()["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        texts = [p["text"] for a in task["artifacts"] for p in a["parts"]]
        assert texts == ["first half", "second half"]
