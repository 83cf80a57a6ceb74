"""What every registered agent takes from its registry entry: its card facts and its
long-term memory options."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.agents.base import AgentSkill
from gateway.agents.specs import AgentEntry

__all__ = ["RegisteredAgent", "skills_of"]


def skills_of(entry: AgentEntry) -> tuple[AgentSkill, ...]:
    return tuple(AgentSkill(s.id, s.name, s.description, tuple(s.tags)) for s in entry.skills)


class RegisteredAgent:
    input_modes: Sequence[str] = ("text/plain", "application/json")
    output_modes: Sequence[str] = ("text/plain", "application/json")

    def __init__(self, entry: AgentEntry) -> None:
        self.id, self.name, self.description = entry.id, entry.name, entry.description
        self.version = str(entry.revision)  # the card's version follows the entry's revision
        self.skills: Sequence[AgentSkill] = skills_of(entry)
        config = entry.typed_config()
        self.memory_options: dict[str, Any] | None = config.memory
        self.run_policy: str | None = config.runPolicy
