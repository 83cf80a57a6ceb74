"""Typed validation of client input, with the protocol's error for what fails."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from gateway.errors import InvalidParamsError

__all__ = ["validated"]

M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: Any, prefix: str = "") -> M:
    """``data`` as ``model``, or ``InvalidParamsError`` listing each field (under ``prefix``)
    and pydantic's reason — never the input."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {
                "field": ".".join([prefix] * bool(prefix) + [str(p) for p in e["loc"]]) or "body",
                "reason": e["msg"],
            }
            for e in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        raise InvalidParamsError("Request failed validation", data={"errors": errors}) from None
