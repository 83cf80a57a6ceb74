"""Parsing of bodies and query parameters into typed values, with protocol errors.

Strict at the boundary: a JSON body must say it is JSON, nest at most ``MAX_JSON_DEPTH``
levels, and a query integer is ASCII digits only (no sign, space, exponent or other
script's digits).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import orjson
from starlette.requests import Request

from gateway.errors import ContentTypeNotSupportedError, InvalidParamsError, JSONParseError
from gateway.validation import MAX_INT, validated

__all__ = [
    "JSON_MEDIA_TYPES",
    "MAX_INT",
    "MAX_JSON_DEPTH",
    "json_body",
    "query_bool",
    "query_choice",
    "query_int",
    "validated",
]

JSON_MEDIA_TYPES = frozenset({"application/json", "application/a2a+json"})
# Objects and arrays nested in a body, the body itself counting as one. orjson writes at
# most 254 levels: with this bound every stored object and every answer built around it
# (a task around a message around its parts) can be written back.
MAX_JSON_DEPTH = 128
_DIGITS = re.compile(r"[0-9]{1,10}")
T = TypeVar("T", bound=str)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").partition(";")[0].strip().lower()


def _too_deep(value: Any) -> bool:
    """Whether objects and arrays nest deeper than ``MAX_JSON_DEPTH`` in ``value``
    (iterative: a deep body cannot exhaust the stack)."""
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            if level > MAX_JSON_DEPTH:
                return True
            stack.extend((child, level + 1) for child in node if isinstance(child, dict | list))
    return False


async def json_body(request: Request, *, optional: bool = False) -> Any:
    """The body as JSON; ``optional`` bodies may be empty (then None, whatever the type)."""
    raw = await request.body()
    if not raw.strip() and optional:
        return None
    if _media_type(request) not in JSON_MEDIA_TYPES:
        raise ContentTypeNotSupportedError("Request bodies must be application/json")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise JSONParseError() from None
    # A body cannot nest deeper than it has brackets: most are not even walked.
    if raw.count(b"{") + raw.count(b"[") > MAX_JSON_DEPTH and _too_deep(body):
        raise InvalidParamsError(
            f"The body nests objects and arrays more than {MAX_JSON_DEPTH} levels deep",
            data={"errors": [{"field": "body", "reason": f"nested over {MAX_JSON_DEPTH} levels"}]},
        )
    return body


def _invalid(name: str, reason: str) -> InvalidParamsError:
    return InvalidParamsError(
        f"{name} {reason}", data={"errors": [{"field": name, "reason": reason}]}
    )


def query_int(
    request: Request,
    *names: str,
    default: int | None,
    minimum: int = 0,
    maximum: int = MAX_INT,
) -> int | None:
    """The first of ``names`` (spellings of one parameter) present in the query string, as
    a bounded integer; every spelling given must be valid."""
    found: int | None = None
    for name in reversed(names):
        raw = request.query_params.get(name)
        if raw is None:
            continue
        value = int(raw) if _DIGITS.fullmatch(raw) else None
        if value is None or not minimum <= value <= maximum:
            raise _invalid(name, f"must be an integer from {minimum} to {maximum}")
        found = value
    return default if found is None else found


def query_bool(request: Request, name: str, *, default: bool) -> bool:
    """A ``true``/``false`` (or ``1``/``0``) query parameter."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw.lower() not in ("true", "false", "1", "0"):
        raise _invalid(name, "must be true or false")
    return raw.lower() in ("true", "1")


def query_choice(request: Request, name: str, choices: Sequence[T], default: T) -> T:
    """A query parameter that is one of ``choices`` (spelled exactly)."""
    raw = request.query_params.get(name)
    if raw is None:
        return default
    for choice in choices:
        if raw == choice:
            return choice
    raise _invalid(name, f"must be one of {', '.join(map(str, choices))}")


_CURSOR = re.compile(r"[0-9]{1,19}-[0-9]{1,19}")  # a stream id (each part below 2**64)
_EPOCH_MS = re.compile(r"[0-9]{1,15}")
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def query_time_ms(request: Request, name: str) -> int | None:
    """A time as milliseconds since the epoch, given as such or as ISO 8601."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if _EPOCH_MS.fullmatch(raw):
        return int(raw)
    text = raw.replace("t", "T").replace("z", "Z")  # RFC 3339 allows either case
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        if not _RFC3339.fullmatch(raw):
            raise ValueError(raw)
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise _invalid(
            name, "must be an RFC 3339 date-time or milliseconds since the epoch"
        ) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return int(stamp.timestamp() * 1000)


def query_cursor(request: Request, name: str) -> str | None:
    raw = request.query_params.get(name)
    if raw is not None and not _CURSOR.fullmatch(raw):
        raise _invalid(name, "must be a nextCursor of an earlier page")
    return raw


def query_text(request: Request, name: str, max_length: int = 256) -> str | None:
    raw = request.query_params.get(name)
    if raw is not None and not 1 <= len(raw) <= max_length:
        raise _invalid(name, f"must be 1 to {max_length} characters")
    return raw
