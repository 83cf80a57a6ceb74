"""Media-type negotiation for ``acceptedOutputModes`` (pure)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["accepts_any"]


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
