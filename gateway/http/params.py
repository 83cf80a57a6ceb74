"""Parsing of bodies and query parameters into typed values, with protocol errors."""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from gateway.errors import InvalidParamsError, JSONParseError
from gateway.validation import validated

__all__ = ["json_body", "query_bool", "query_int", "validated"]


async def json_body(request: Request, *, optional: bool = False) -> Any:
    raw = await request.body()
    if not raw.strip() and optional:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise JSONParseError() from None


def query_int(
    request: Request,
    *names: str,
    default: int | None,
    minimum: int = 0,
    maximum: int | None = None,
) -> int | None:
    """The first of ``names`` present in the query string, as a bounded integer."""
    for name in names:
        raw = request.query_params.get(name)
        if raw is None:
            continue
        try:
            value = int(raw)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
            raise InvalidParamsError(
                f"{names[0]} must be an integer {bounds}",
                data={"errors": [{"field": names[0], "reason": f"must be an integer {bounds}"}]},
            )
        return value
    return default


def query_bool(request: Request, name: str, *, default: bool) -> bool:
    """A ``true``/``false`` (or ``1``/``0``) query parameter."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false", "1", "0"):
        raise InvalidParamsError(
            f"{name} must be true or false",
            data={"errors": [{"field": name, "reason": "must be true or false"}]},
        )
    return raw.lower() in ("true", "1")
