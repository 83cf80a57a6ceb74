"""Spans of the libraries the gateway calls through: redis commands (their names and, for
scripts, which one: never arguments, which hold messages) and ``httpx``/``httpx2`` requests
(the URL without its query string), whose ``traceparent`` header carries the trace on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

from gateway.tracing import provider

__all__ = ["instrument_http", "instrument_redis"]


_STATEMENTS = ("db.statement", "db.query.text")


def _attributes_of(span: trace.Span) -> Mapping[str, Any]:
    return getattr(span, "attributes", None) or {}


class _ScriptNames:
    """Names the gateway's scripts on the spans of the EVALSHAs that run them: ``EVALSHA
    send`` rather than a digest. The instrumentation's statement already replaces every
    argument by ``?`` (the tests hold it to that: arguments are message JSON)."""

    def __init__(self, scripts: object | None) -> None:
        self.names: dict[str, str] = {}
        if scripts is not None and dataclasses.is_dataclass(scripts):
            for field in dataclasses.fields(scripts):
                self.names[getattr(scripts, field.name).sha] = field.name

    def __call__(self, current: trace.Span, _: Any, args: Any, __: Any) -> None:
        if len(args) < 2 or args[0] != "EVALSHA" or not current.is_recording():
            return
        script = self.names.get(args[1])
        if script:
            command = f"EVALSHA {script}"
            current.update_name(command)
            current.set_attribute("gateway.script", script)
            attributes = _attributes_of(current)
            for key in _STATEMENTS:
                if key in attributes:
                    current.set_attribute(key, command)


def instrument_redis(client: Any, scripts: object | None = None) -> None:
    """Trace ``client``'s commands: their names, never their arguments (message JSON).
    ``scripts``: a dataclass of registered scripts, named on the spans that run them."""
    if provider.state is None:
        return
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    RedisInstrumentor.instrument_client(
        client, tracer_provider=provider.state.provider, request_hook=_ScriptNames(scripts)
    )


_URL_KEYS = ("http.url", "url.full")


async def _without_query(current: trace.Span, request: Any) -> None:
    """An outbound span's URL without its query string (it may carry a user id or text)."""
    if not current.is_recording():
        return
    url = str(request.url)
    if "?" not in url:
        return
    bare = url.split("?", 1)[0]
    for key in _URL_KEYS:
        if key in _attributes_of(current):
            current.set_attribute(key, bare)


def instrument_http(*clients: Any) -> None:
    """Trace requests of ``httpx`` or ``httpx2`` async clients: a client span each, and a
    ``traceparent`` header that carries the trace to the server."""
    if provider.state is None:
        return
    import httpx2
    from opentelemetry.instrumentation.httpx import (
        HTTPX2ClientInstrumentor,
        HTTPXClientInstrumentor,
    )

    for client in clients:
        instrumentor = (
            HTTPX2ClientInstrumentor
            if isinstance(client, httpx2.AsyncClient)
            else HTTPXClientInstrumentor
        )
        instrumentor.instrument_client(
            client, tracer_provider=provider.state.provider, request_hook=_without_query
        )
