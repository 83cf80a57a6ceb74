"""The proto3 JSON rules for enums that the A2A 1.0 readers share: an enum is given by its
name or its number, and a request's enum it does not know reads as unspecified, as
protobuf's own parser reads it."""

from __future__ import annotations

from typing import Any

__all__ = ["enum_name", "open_enum"]


def enum_name(value: Any, names: tuple[str, ...]) -> Any:
    """An enum given by its number as its name (proto3 JSON); anything else as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    return value


def open_enum(value: Any, names: tuple[str, ...], known: Any = ()) -> Any:
    """A request's enum as the official 1.x servers read it (protobuf's parser, unknown
    fields ignored): a name or number; a name or number it does not know (a newer
    proto's, or ``"UNRECOGNIZED"``, which protobuf-es clients send for an unset enum) is
    the unspecified value (``names[0]``). ``known``: other names read too. Anything that
    is no enum at all (a boolean, a fraction, an object) is left for validation to refuse."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else names[0]
    if isinstance(value, str) and value not in names and value not in known:
        return names[0]
    return value
