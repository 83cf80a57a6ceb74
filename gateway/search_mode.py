"""The modes of a context search (``hybrid``, ``vector``, ``text``), as agents, the REST and
MCP search and the ranking (``gateway.context_memory.ranking``) name them; and its
consistencies: ``eventual`` searches what is embedded now, ``wait`` first waits (up to
``GATEWAY_SEARCH_WAIT_SECONDS``) until the messages the context had are embedded."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["CONSISTENCIES", "MODES", "Consistency", "Mode"]

Mode = Literal["hybrid", "vector", "text"]
MODES: tuple[Mode, ...] = get_args(Mode)
Consistency = Literal["eventual", "wait"]
CONSISTENCIES: tuple[Consistency, ...] = get_args(Consistency)
