"""``RawJson``: what was stored as A2A JSON (a status, artifacts, messages, metadata),
carried as the bytes as stored and parsed only when something reads into them. The wire
formats write it as it is where the format is the stored one."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["RawJson"]


class RawJson:
    """A JSON value as it was stored (compact UTF-8 JSON), passed through unparsed; ``value``
    parses it on first use."""

    __slots__ = ("_value", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._value: Any = _UNPARSED

    @classmethod
    def of(cls, value: Any) -> RawJson:
        """A value built here (not read from the store)."""
        out = cls(orjson.dumps(value))
        out._value = value
        return out

    @property
    def value(self) -> Any:
        """The parsed value (shared: do not change it)."""
        if self._value is _UNPARSED:
            self._value = orjson.loads(self.raw)
        return self._value

    def fragment(self) -> orjson.Fragment:
        """The value for ``orjson.dumps``, written as it is."""
        return orjson.Fragment(self.raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawJson) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:  # never the content: it is PHI
        return f"RawJson({len(self.raw)} bytes)"


_UNPARSED: Any = object()
