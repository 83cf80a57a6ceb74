"""Agents by id."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.agents.base import Agent
from gateway.agents.echo import EchoAgent
from gateway.errors import AgentNotFoundError

__all__ = ["AgentRegistry"]


class AgentRegistry:
    def __init__(self, agents: Iterable[Agent] = ()) -> None:
        self._agents: dict[str, Agent] = {"echo": EchoAgent()}
        for agent in agents:
            self._agents[agent.id] = agent

    def get(self, agent_id: str) -> Agent:
        try:
            return self._agents[agent_id]
        except KeyError:
            raise AgentNotFoundError() from None

    def ids(self) -> list[str]:
        return sorted(self._agents)
