"""Agents from configuration: ``GATEWAY_AGENT_PLUGINS=package.module:ClassName,...``."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from gateway.agents.base import Agent

__all__ = ["load_agents"]


def load_agents(paths: Sequence[str]) -> list[Agent]:
    """Instantiate each ``module:attribute`` (a class taking no arguments)."""
    agents: list[Agent] = []
    for path in paths:
        module_name, _, attribute = path.partition(":")
        if not module_name or not attribute:
            raise ValueError(f"agent plugin must be 'module:Class', got {path!r}")
        factory = getattr(importlib.import_module(module_name), attribute)
        agents.append(factory())
    return agents
