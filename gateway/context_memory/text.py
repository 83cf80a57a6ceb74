"""What of a user message is embedded (pure).

Text parts are taken as they are; a DataPart is flattened to ``path: value`` lines,
unless its ``data`` carries an internal marker key (``$memoryType`` or
``$targetExpert``), in which case it is skipped; FileParts are never embedded.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["MARKER_KEYS", "embeddable_text"]

MARKER_KEYS = frozenset({"$memoryType", "$targetExpert"})


def _flatten(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _flatten(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for item in value:
            yield from _flatten(item, path)
    elif value is not None:
        yield f"{path}: {value}" if path else str(value)


def embeddable_text(message: Mapping[str, Any]) -> str:
    """The text to embed for a message ('' when nothing of it is embeddable)."""
    pieces: list[str] = []
    for part in message.get("parts", ()):
        kind = part.get("kind")
        if kind == "text":
            pieces.append(part.get("text", ""))
        elif kind == "data":
            data = part.get("data") or {}
            if not MARKER_KEYS.intersection(data):
                pieces.extend(_flatten(data, ""))
    return "\n".join(p for p in pieces if p.strip())
