"""The modes of a context search (``hybrid``, ``vector``, ``text``), as agents, the REST and
MCP search and the ranking (``gateway.context_memory.ranking``) name them."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["MODES", "Mode"]

Mode = Literal["hybrid", "vector", "text"]
MODES: tuple[Mode, ...] = get_args(Mode)
