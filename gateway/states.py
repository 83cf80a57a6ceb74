"""A2A task states: which end a task, and which hand the turn back to the client."""

from __future__ import annotations

__all__ = ["INTERRUPTED", "TERMINAL", "settled"]

TERMINAL = frozenset({"completed", "canceled", "failed", "rejected"})
INTERRUPTED = frozenset({"input-required", "auth-required"})


def settled(state: str) -> bool:
    """Whether a blocking request should return on this state."""
    return state in TERMINAL or state in INTERRUPTED
