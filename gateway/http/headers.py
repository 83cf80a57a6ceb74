"""A request header read from the raw list, for headers a request usually lacks.

Starlette's ``Headers.get`` reads through ``Mapping.get``: a header that is absent raises a
``KeyError`` that it catches, ~1.5 µs each. A send asks for a few such headers (``Origin``,
``Tenant-Name``); ``header`` answers the same (the first value, decoded as Latin-1) without
an exception.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["header"]


def header(raw: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of header ``name`` (lowercase, as ASGI lists names) in ``raw``, as
    ``Headers.get`` gives it; None when there is none."""
    for key, value in raw:
        if key == name:
            return value.decode("latin-1")
    return None
