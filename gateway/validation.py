"""Typed validation of client input, with the protocol's error for what fails."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, Strict, ValidationError
from pydantic_core import ErrorDetails

from gateway.errors import InvalidParamsError

__all__ = ["MAX_INT", "JsonInt", "validated"]

M = TypeVar("M", bound=BaseModel)
# Counts, offsets and lengths a client gives stay within a signed 32-bit integer.
MAX_INT = 2**31 - 1


def _integral(value: object) -> object:
    # JSON Schema's integer is a number without a fractional part: 3.0 is one.
    return int(value) if isinstance(value, float) and value.is_integer() else value


# An integer as JSON writes it (3, or 3.0), never a string ("3") nor a boolean (true).
JsonInt = Annotated[int, BeforeValidator(_integral), Strict()]


def _error(e: ErrorDetails, prefix: str) -> dict[str, str]:
    """One field error: its path and pydantic's reason, except where that reason quotes the
    value (a discriminator's tag)."""
    reason = e["msg"]
    if e["type"] == "union_tag_invalid":
        reason = f"kind must be one of {e.get('ctx', {}).get('expected_tags', 'the known kinds')}"
    loc = [prefix] * bool(prefix) + [str(p) for p in e["loc"]]
    return {"field": ".".join(loc) or "body", "reason": reason}


def validated(model: type[M], data: Any, prefix: str = "") -> M:
    """``data`` as ``model``, or ``InvalidParamsError`` listing each field (under ``prefix``)
    and pydantic's reason — never the input."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [_error(e, prefix) for e in exc.errors(include_url=False, include_input=False)]
        raise InvalidParamsError("Request failed validation", data={"errors": errors}) from None
