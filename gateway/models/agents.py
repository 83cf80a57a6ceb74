"""The registry's agents as clients read them (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["AgentList", "AgentView"]


@dataclass(frozen=True, slots=True)
class AgentView:
    """An agent of the registry as clients read it: a built-in one (``built_in``: only its
    id, name, description, type and skills), or a tenant's entry, secrets left out (its
    config shows ``apiKeySet`` for a stored ``apiKey``). ``skills`` are A2A AgentSkills."""

    id: str
    name: str
    description: str
    type: str
    skills: list[dict[str, Any]]
    built_in: bool
    system_prompt: str = ""
    config: dict[str, Any] | None = None
    ephemeral: bool = False
    revision: int = 0
    created_at: str = ""
    updated_at: str = ""


@dataclass(frozen=True, slots=True)
class AgentList:
    """A tenant's agents: the built-in ones, then its entries."""

    items: list[AgentView]
    total: int
