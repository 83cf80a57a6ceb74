"""Starlette's router, with the routes a path may match looked up by its first segment.

Starlette tries every route's regular expression in order until one matches: with a hundred
routes (every binding at every agent base) a path near the end of the list cost ~70 µs
per request on an idle core before it reached its endpoint. This router keeps Starlette's
semantics (first full match wins, else the first partial match answers 405, else the
trailing-slash redirect, else 404) but tries only the routes whose first path segment is
that literal or a parameter, in their original order, so a send over any binding is matched
among a handful of routes. Endpoints are served without the exception wrapper Starlette puts
around each (``_lean``): the ``ExceptionMiddleware`` answers their errors alike.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route, Router
from starlette.types import ASGIApp, Lifespan, Receive, Scope, Send

__all__ = ["IndexedRouter", "first_segment"]


def first_segment(path: str) -> str:
    """``/a2a/message:send`` → ``a2a``; ``/`` → ``""``."""
    end = path.find("/", 1)
    return path[1:] if end < 0 else path[1:end]


def _literal_head(route: BaseRoute) -> str | None:
    """The literal first segment every path of the route starts with; None when it is a
    parameter (or the route is of a kind whose paths this cannot tell)."""
    if isinstance(route, Route | Mount):
        head = first_segment(route.path)
        if "{" not in head:
            return head
    return None


def _lean(endpoint: Callable[[Request], Awaitable[Response]]) -> ASGIApp:
    """Starlette's ``request_response`` without the exception wrapper it puts around each
    endpoint: an endpoint's exception reaches the ``ExceptionMiddleware``'s, which holds the
    same handlers and answers it alike (no response has started). Two coroutine layers,
    three closures and a wrapper of ``send`` less on every request."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        response = await endpoint(_Request(scope, receive, send))
        await response(scope, receive, send)

    return app


class _Request(Request):
    """Starlette's request, its body read in a loop over ``receive``: Starlette reads it
    through ``stream()``, an async generator in ``aclosing`` (three steps, a
    ``StopAsyncIteration`` and a close for a body that comes in one message, as nearly every
    one does). The same reads, checks and errors, and the body kept as Starlette keeps it."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            if self._stream_consumed:
                raise RuntimeError("Stream consumed")
            chunks: list[bytes] = []
            while not self._stream_consumed:
                message = await self._receive()
                if message["type"] == "http.request":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body", False):
                        self._stream_consumed = True
                elif message["type"] == "http.disconnect":
                    self._is_disconnected = True
                    raise ClientDisconnect()
            self._body = b"".join(chunks)
        return self._body


def _function_endpoint(route: BaseRoute) -> Callable[[Request], Awaitable[Response]] | None:
    """The endpoint of a route Starlette serves through ``request_response`` (an async
    function or method), or None."""
    if type(route) is not Route:
        return None
    handler = route.endpoint
    while isinstance(handler, functools.partial):
        handler = handler.func
    if not (inspect.isfunction(handler) or inspect.ismethod(handler)):
        return None
    return route.endpoint if inspect.iscoroutinefunction(handler) else None


class IndexedRouter(Router):
    def __init__(self, routes: Sequence[BaseRoute], lifespan: Lifespan[Any] | None) -> None:
        super().__init__(list(routes), lifespan=lifespan)
        for route in self.routes:
            endpoint = _function_endpoint(route)
            if endpoint is not None:
                route.app = _lean(endpoint)  # type: ignore[attr-defined]
        heads = {h for h in map(_literal_head, self.routes) if h is not None}
        # For each literal head: its routes and the parameter-headed ones, in list order.
        self._by_head = {
            head: [r for r in self.routes if _literal_head(r) in (head, None)] for head in heads
        }
        self._any_head = [r for r in self.routes if _literal_head(r) is None]

    def candidates(self, path: str) -> list[BaseRoute]:
        """The routes that may match ``path``, in the order Starlette would try them."""
        return self._by_head.get(first_segment(path), self._any_head)

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        # Router's, without a coroutine of its own (see stack.py).
        return self.middleware_stack(scope, receive, send)

    def app(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        if scope["type"] == "lifespan" or scope.get("root_path"):
            return super().app(scope, receive, send)  # mounted elsewhere: the plain search
        scope.setdefault("router", self)
        partial: tuple[BaseRoute, Scope] | None = None
        for route in self.candidates(scope["path"]):
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                scope["route"] = route
                scope.update(child_scope)
                return _handled(route, scope, receive, send)
            if match is Match.PARTIAL and partial is None:
                partial = (route, child_scope)
        if partial is not None:
            scope["route"] = partial[0]
            scope.update(partial[1])
            return partial[0].handle(scope, receive, send)
        return super().app(scope, receive, send)  # redirect or 404, as Starlette decides


def _handled(
    route: BaseRoute, scope: Scope, receive: Receive, send: Send
) -> Coroutine[Any, Any, None]:
    """``route.handle``: a plain route's app straight away when it takes the method (its
    ``handle`` would only check that, then await the app)."""
    if type(route) is Route and (not route.methods or scope["method"] in route.methods):
        return route.app(scope, receive, send)  # type: ignore[return-value]
    return route.handle(scope, receive, send)
