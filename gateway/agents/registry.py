"""Agents by id: the built-in ones (``echo`` and plugins) and each tenant's registered ones.

Registered agents live in Redis (``store/agents_store.py``), so every replica and worker
sees the same; an agent object is built from its entry on first use and kept for a
moment (``cache_seconds``), then re-read, so a change or delete reaches every process
within that time (at once in the process that made it).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import httpx
import httpx2
import orjson

from gateway.agents.base import Agent
from gateway.agents.echo import EchoAgent
from gateway.agents.key_env import KeyEnvPolicy
from gateway.agents.openai_agent import OpenAIAgent
from gateway.agents.registered import skills_of
from gateway.agents.remote import Cards, RemoteAgent
from gateway.agents.specs import AgentEntry
from gateway.errors import AgentNotFoundError
from gateway.outbound import Allowlist
from gateway.store.agents_store import AgentStore

__all__ = ["AgentFactory", "AgentRegistry"]


class ConfiguredEcho(EchoAgent):
    """The echo agent under a registered name, card and memory options."""

    def __init__(self, entry: AgentEntry) -> None:
        self.id, self.name, self.description = entry.id, entry.name, entry.description
        self.version = str(entry.revision)
        if entry.skills:
            self.skills = skills_of(entry)
        config = entry.typed_config()
        self.memory_options = config.memory
        self.run_policy = config.runPolicy


class AgentFactory:
    """Builds the agent object of a registry entry."""

    def __init__(
        self,
        allowlist: Allowlist,
        http: httpx.AsyncClient,
        http2: httpx2.AsyncClient,
        key_env: KeyEnvPolicy | None = None,
    ) -> None:
        """``http`` serves remote A2A agents, ``http2`` the ``openai`` SDK; both check every
        request against the allowlist. ``key_env``: the variables ``apiKeyEnv`` may name."""
        self.allowlist, self.http, self.http2 = allowlist, http, http2
        self.key_env = key_env or KeyEnvPolicy()
        self.cards = Cards()

    def build(self, entry: AgentEntry) -> Agent:
        config = entry.typed_config()
        if entry.type == "openai":
            return OpenAIAgent(entry, config, self.allowlist, self.http2, self.key_env)
        if entry.type == "a2a-remote":
            return RemoteAgent(entry, config, self.allowlist, self.http, self.key_env, self.cards)
        return ConfiguredEcho(entry)


class AgentRegistry:
    def __init__(
        self,
        agents: Iterable[Agent],
        store: AgentStore,
        factory: AgentFactory,
        *,
        cache_seconds: float = 2.0,
    ) -> None:
        self._builtin: dict[str, Agent] = {"echo": EchoAgent()}
        for agent in agents:
            self._builtin[agent.id] = agent
        self.store, self._factory, self._cache_seconds = store, factory, cache_seconds
        self.key_env = factory.key_env
        # (tenant, id) -> (read at, revision, agent)
        self._cache: dict[tuple[str, str], tuple[float, int, Agent]] = {}

    def builtin(self, agent_id: str) -> Agent | None:
        return self._builtin.get(agent_id)

    def builtins(self) -> list[Agent]:
        return [self._builtin[i] for i in sorted(self._builtin)]

    def get(self, agent_id: str) -> Agent:
        """A built-in agent (no tenant needed)."""
        agent = self._builtin.get(agent_id)
        if agent is None:
            raise AgentNotFoundError()
        return agent

    async def entry(self, tenant: str, agent_id: str) -> AgentEntry | None:
        raw = await self.store.read(tenant, agent_id)
        return AgentEntry.model_validate(orjson.loads(raw)) if raw is not None else None

    async def resolve(self, tenant: str, agent_id: str) -> Agent:
        """The agent ``agent_id`` as ``tenant`` sees it: built-in, or registered by the tenant;
        another tenant's agent is not found."""
        agent = self._builtin.get(agent_id)
        if agent is not None:
            return agent
        key = (tenant, agent_id)
        cached = self._cache.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[2]
        entry = await self.entry(tenant, agent_id)
        if entry is None:
            self._cache.pop(key, None)
            raise AgentNotFoundError()
        if cached is not None and cached[1] == entry.revision:
            built = cached[2]
        else:
            built = self._factory.build(entry)
        self._cache[key] = (now, entry.revision, built)
        return built

    def kind(self, agent_id: str, agent: Agent | None = None) -> str:
        """The type of agent ``agent_id`` (resolved as ``agent``), for metrics: ids of
        registered agents are per tenant and unbounded, their types are not. ``echo`` (the
        built-in one, or a registered echo entry), ``openai``, ``a2a-remote``, ``plugin``
        (any other built-in agent), or ``unknown`` (a registered agent not resolved)."""
        builtin = self._builtin.get(agent_id)
        if builtin is not None:
            return "echo" if type(builtin) is EchoAgent else "plugin"
        if isinstance(agent, OpenAIAgent):
            return "openai"
        if isinstance(agent, RemoteAgent):
            return "a2a-remote"
        if isinstance(agent, ConfiguredEcho):
            return "echo"
        return "unknown"

    def forget(self, tenant: str, agent_id: str) -> None:
        """Drop a cached agent (its entry changed here)."""
        self._cache.pop((tenant, agent_id), None)
