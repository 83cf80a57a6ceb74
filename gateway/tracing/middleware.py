"""The HTTP requests' spans: OpenTelemetry's ASGI middleware, wrapped to leave scrapes and
probes out, sample a request without ``traceparent`` before it does any work, keep the query
string and exception messages off the span, and name it by route and A2A operation."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

from gateway.tracing import provider
from gateway.tracing.spans import failed

__all__ = ["UNTRACED_PATHS", "TracingMiddleware", "middleware"]

# Requests that are not traced: scrapes and probes.
UNTRACED_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_REQUEST = "gateway.tracing"


@dataclass
class _Request:
    scope: Scope
    error: BaseException | None = None


def _span_details(scope: Scope) -> tuple[str, dict[str, Any]]:
    """A request's span is named by its method until routing names the route."""
    return str(scope.get("method") or "HTTP"), {}


def _name_by_operations(current: trace.Span, operations: Any) -> None:
    """A JSON-RPC request's span is named by its method, as OpenTelemetry's RPC conventions
    say (``rpc.system``, ``rpc.method``); every operation's A2A outcome is recorded (``ok``
    or the error's name, which JSON-RPC wraps in HTTP 200) and a failure's as ``error.type``."""
    rpc = [o for o in operations if o.binding != "rest"]
    if rpc:
        methods = sorted({o.name for o in rpc})
        current.update_name(methods[0] if len(methods) == 1 else f"{rpc[0].binding} batch")
        current.set_attribute("rpc.system", rpc[0].binding)
        current.set_attribute("rpc.method", ",".join(methods))
        if rpc[0].binding == "jsonrpc":
            current.set_attribute("rpc.jsonrpc.version", "2.0")
    outcomes = [o.outcome for o in operations]
    if outcomes:
        current.set_attribute("a2a.outcome", ",".join(outcomes))
        failed = [o for o in outcomes if o != "ok"]
        if failed:
            current.set_attribute("error.type", failed[0])


class TracingMiddleware:
    """OpenTelemetry's ASGI middleware around the app, except for /metrics and the probes.
    The span never sees the query string; it is named after the route's template (ids stay
    out of the name) and carries the request id. An unexpected exception is recorded by
    type, not message.

    A request that brings no ``traceparent`` is sampled here, at the configured ratio,
    before OpenTelemetry's middleware does any work: one left out runs under a context
    marked not sampled, so its jobs and outbound calls carry that decision on."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        assert provider.state is not None, "tracing is on"
        self.app, self._ratio = app, provider.state.ratio
        self._ids = RandomIdGenerator()
        self._traced = OpenTelemetryMiddleware(
            self._inner,
            default_span_details=_span_details,
            tracer_provider=provider.state.provider,
            exclude_spans=["receive", "send"],
        )

    def _left_out(self, scope: Scope) -> bool:
        if self._ratio >= 1.0 or any(name == b"traceparent" for name, _ in scope["headers"]):
            return False
        return random.random() >= self._ratio

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        if self._left_out(scope):
            unsampled = trace.NonRecordingSpan(
                trace.SpanContext(
                    self._ids.generate_trace_id(), self._ids.generate_span_id(), is_remote=False
                )
            )
            token = otel_context.attach(trace.set_span_in_context(unsampled))
            try:
                await self.app(scope, receive, send)
            finally:
                otel_context.detach(token)
            return
        request = _Request(scope)
        await self._traced({**scope, "query_string": b"", _REQUEST: request}, receive, send)
        if request.error is not None:
            raise request.error

    async def _inner(self, traced: Scope, receive: Receive, send: Send) -> None:
        request: _Request = traced[_REQUEST]
        scope, current = request.scope, trace.get_current_span()

        def name_by_route() -> None:
            route = getattr(scope.get("route"), "path_format", None)
            if isinstance(route, str):
                current.update_name(f"{scope.get('method', 'HTTP')} {route}")
                current.set_attribute("http.route", route)
            _name_by_operations(current, scope.get("state", {}).get("operations", ()))

        async def send_noting(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":  # routed; the span ends with the body
                name_by_route()
                for name, value in message.get("headers") or ():
                    if name == b"x-request-id":
                        current.set_attribute("gateway.request_id", value.decode("latin-1"))
            await send(message)

        try:
            await self.app(scope, receive, send_noting)
        except Exception as exc:  # re-raised outside OpenTelemetry's span, which would
            name_by_route()  # record its message
            failed(exc, current)
            request.error = exc


def middleware() -> list[Any]:
    """The tracing middleware (outermost), when tracing is on."""
    if provider.state is None:
        return []
    from starlette.middleware import Middleware

    return [Middleware(TracingMiddleware)]
