"""Neutral A2A helpers (pure): which task states end a task or hand the turn back to the
client, and media-type negotiation for ``acceptedOutputModes``.

The store's Lua scripts get these sets generated into their prelude (``store/scripts.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["INTERRUPTED", "TERMINAL", "accepts_any", "settled"]

TERMINAL = frozenset({"completed", "canceled", "failed", "rejected"})
INTERRUPTED = frozenset({"input-required", "auth-required"})


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
