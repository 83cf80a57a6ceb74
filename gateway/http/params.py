"""Parsing of bodies and query parameters into typed values, with protocol errors."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from gateway.errors import InvalidParamsError, JSONParseError

__all__ = ["json_body", "query_int", "validated"]

M = TypeVar("M", bound=BaseModel)


async def json_body(request: Request, *, optional: bool = False) -> Any:
    raw = await request.body()
    if not raw.strip() and optional:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise JSONParseError() from None


def validated(model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": ".".join(str(p) for p in e["loc"]) or "body", "reason": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        raise InvalidParamsError("Request failed validation", data={"errors": errors}) from None


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
