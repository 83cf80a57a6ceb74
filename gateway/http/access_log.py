"""Request ids, one structured access-log line per request (ids and timings only), and the
request metrics: rate, status and duration per binding and route *template*, and per
operation with its A2A outcome (``operations.py``). Neither the log nor a label carries
the request's path or query: route templates and method names only.

The route is the one Starlette's router matched (``scope["route"]``, set as it routes), so
the lookup costs nothing extra; a request refused before routing (authentication, host
rule, body limit) is matched here. Labels per route are built once and their series kept.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable
from typing import Any

from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.entropy import random_bytes
from gateway.http.operations import Operation, finished, noted, outcome_of_body
from gateway.http.response_start import started, status_of
from gateway.http.router import IndexedRouter
from gateway.metrics import REQUEST_SECONDS, REQUESTS

__all__ = ["AccessLogMiddleware", "matched_route", "route_labels"]

# A client's own request id is kept (echoed and logged) only when it is short and plain,
# all of it: a trailing line break would forge a log line or break the response header.
_SAFE_ID = re.compile(rb"[A-Za-z0-9._-]{1,64}")
# A convertor in a route's path: ``{task_id:id}`` is shown as ``{task_id}``.
_CONVERTOR = re.compile(r"\{([^{}:]+):[^{}]*\}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
UNMATCHED = "unmatched"
# Routes of another binding than REST (JSON-RPC's are told by their endpoint).
_BINDINGS = {"/mcp": "mcp"}


def route_labels(route: Any) -> tuple[str, str]:
    """(binding, route template) of a matched route (None: unmatched)."""
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return "rest", UNMATCHED
    template = _CONVERTOR.sub(r"{\1}", path)
    if getattr(route, "name", None) == "jsonrpc_endpoint":
        return "jsonrpc", template
    return _BINDINGS.get(template, "rest"), template


def matched_route(scope: Scope) -> Any:
    """The route that serves the request: the router's match, or, for a request refused
    before it was routed, the route that would have served it (None: no route)."""
    route = scope.get("route")
    if route is not None or "router" in scope:
        return route
    partial = None
    router = getattr(scope.get("app"), "router", None)
    routes = (
        router.candidates(scope["path"])
        if isinstance(router, IndexedRouter)
        else getattr(router, "routes", ())
    )
    for candidate in routes:
        match, _ = candidate.matches(scope)
        if match is Match.FULL:
            return candidate
        if match is Match.PARTIAL and partial is None:
            partial = candidate
    return partial


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp, enabled: bool = True) -> None:
        self.app, self.enabled = app, enabled
        # (id of the route, method, status) -> its request counter and duration histogram;
        # the routes are this app's, alive as long as it is, and methods are bounded.
        self._series: dict[tuple[int, str, int], tuple[Any, Any, tuple[str, str]]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next(
            (v for k, v in scope["headers"] if k == b"x-request-id" and _SAFE_ID.fullmatch(v)),
            None,
        )
        request_id = given or random_bytes(16).hex().encode()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id.decode()
        state["request_id_given"] = given is not None  # the audit trail keeps its digest
        began = time.perf_counter()
        error_body: list[bytes] = []

        # The one wrapper of `send` of the middlewares (see response_start.py); a plain
        # function handing back the server's awaitable (see stack.py).
        def send_with_id(message: Message) -> Awaitable[None]:
            if message["type"] == "http.response.start":
                started(scope, message)
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", request_id)]
            elif message["type"] == "http.response.body" and status_of(scope) >= 400:
                error_body.append(message.get("body", b""))  # an error's name, for its outcome
            return send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            seconds = time.perf_counter() - began
            status = status_of(scope)
            binding, template = self._observe(scope, status, seconds)
            operations = noted(scope) or [
                Operation(binding, template, outcome_of_body(status, b"".join(error_body)))
            ]
            finished(
                operations,
                seconds,
                log_line=self.enabled,
                request_id=request_id.decode(),
                method=scope["method"],
                route=template,
                status=status,
            )

    def _observe(self, scope: Scope, status: int, seconds: float) -> tuple[str, str]:
        """Counts the request; its (binding, route template)."""
        route = matched_route(scope)
        method = scope["method"] if scope["method"] in _METHODS else "OTHER"
        key = (id(route), method, status)
        series = self._series.get(key)
        if series is None:
            binding, template = route_labels(route)
            series = (
                REQUESTS.labels(binding, method, template, str(status)),
                REQUEST_SECONDS.labels(binding, method, template),
                (binding, template),
            )
            self._series[key] = series
        series[0].inc()
        series[1].observe(seconds)
        return series[2]
