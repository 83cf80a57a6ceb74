"""What runs an agent, from settings: the agent registry (built-in, plugins and tenants'
entries), the task events and the run executor."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.agents.base import Agent
from gateway.agents.key_env import KeyEnvPolicy
from gateway.agents.plugins import load_agents
from gateway.agents.registry import AgentFactory, AgentRegistry
from gateway.engine.events import TaskEvents
from gateway.engine.executor import RunExecutor
from gateway.runtime.clients import HttpClients
from gateway.runtime.memory import Memory
from gateway.runtime.stores import Stores
from gateway.settings import Settings

__all__ = ["agent_registry", "run_executor"]


def agent_registry(
    settings: Settings, stores: Stores, http: HttpClients, extra_agents: Iterable[Agent] = ()
) -> AgentRegistry:
    """The agents of ``GATEWAY_AGENT_PLUGINS`` and ``extra_agents`` beside the tenants'
    entries; ``GATEWAY_DEFAULT_AGENT`` checked to be one of them."""
    agents = AgentRegistry(
        [*load_agents(settings.agent_plugins), *extra_agents],
        stores.agents,
        AgentFactory(
            http.allowlist,
            *http.outbound,
            KeyEnvPolicy.of(settings.agent_key_env_prefix, settings.agent_key_env_names),
        ),
        cache_seconds=settings.agent_cache_seconds,
    )
    agents.get(settings.default_agent)
    return agents


def run_executor(
    settings: Settings, stores: Stores, agents: AgentRegistry, events: TaskEvents, memory: Memory
) -> RunExecutor:
    """The executor of every run this process takes, from either queue."""
    return RunExecutor(
        stores.store,
        agents,
        events,
        context_window=settings.agent_context_messages,
        working_after=settings.working_after_ms / 1000,
        longterm=memory.longterm,
        search_for=memory.search.for_run,
        retry_seconds=settings.job_lease_seconds,
    )
