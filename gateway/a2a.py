"""Neutral A2A helpers (pure): which task states end a task or hand the turn back to the
client, and media-type negotiation for ``acceptedOutputModes``.

The store's Lua scripts get the states and these sets generated into their prelude
(``store/lua/contract.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AUTH_REQUIRED",
    "CANCELED",
    "COMPLETED",
    "FAILED",
    "INPUT_REQUIRED",
    "INTERRUPTED",
    "REJECTED",
    "SUBMITTED",
    "TERMINAL",
    "WORKING",
    "accepts_any",
    "settled",
]

# Task states (A2A 0.3 names, as the core stores them).
SUBMITTED = "submitted"
WORKING = "working"
INPUT_REQUIRED = "input-required"
AUTH_REQUIRED = "auth-required"
COMPLETED = "completed"
CANCELED = "canceled"
FAILED = "failed"
REJECTED = "rejected"

TERMINAL = frozenset({COMPLETED, CANCELED, FAILED, REJECTED})
INTERRUPTED = frozenset({INPUT_REQUIRED, AUTH_REQUIRED})


def settled(state: str) -> bool:
    """Whether a blocking request should return on this state."""
    return state in TERMINAL or state in INTERRUPTED


def _base(media_type: str) -> str:
    return media_type.split(";", 1)[0].strip().lower()


def _matches(produced: str, accepted: str) -> bool:
    if accepted in ("*", "*/*") or accepted == produced:
        return True
    if accepted.endswith("/*"):
        return produced.split("/", 1)[0] == accepted[:-2]
    return False


def accepts_any(produced: Sequence[str], accepted: Sequence[str] | None) -> bool:
    """True when no preference was given or some produced mode is accepted."""
    if not accepted:
        return True
    wanted = [_base(a) for a in accepted]
    return any(_matches(_base(p), a) for p in produced for a in wanted)
