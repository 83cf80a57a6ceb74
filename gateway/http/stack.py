"""The layers Starlette puts around the middlewares, without a coroutine around ``send``.

Starlette's application wraps its middlewares in a ``ServerErrorMiddleware`` (outermost: an
unhandled exception answers 500) and an ``ExceptionMiddleware`` (innermost: the exception
handlers). Each wraps ``send`` in a coroutine, only to note whether the response has
started, and the ``ExceptionMiddleware`` builds a ``Request`` and two closures per request
for the handler it may call. A coroutine between the endpoint and the server costs every
message of every response a coroutine call (a blocking send's answer is two messages), and
every suspension of the request (each Redis reply it waits for) a frame more to leave and
resume. ``GatewayStarlette`` builds the same stack from ``ServerErrors`` and ``Exceptions``:
the same handling, the same answers and exceptions, ``send`` wrapped by a plain function
that returns the server's awaitable, and the handler's ``Request`` built only when an
exception needs one.

The gateway's own middlewares follow the same rule: a layer with nothing to do after the
app returns hands back the app's awaitable instead of awaiting it in a coroutine of its own.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeGuard

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, ExceptionHandler, Message, Receive, Scope, Send

__all__ = ["Exceptions", "GatewayStarlette", "ServerErrors"]


class ServerErrors(ServerErrorMiddleware):
    """Starlette's ``ServerErrorMiddleware`` with ``send`` wrapped by a plain function."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response_started = False

        def _send(message: Message) -> Awaitable[None]:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            return send(message)

        try:
            await self.app(scope, receive, _send)
        except Exception as exc:
            request = Request(scope)
            response: Any
            if self.debug:
                response = await run_in_threadpool(self.debug_response, request, exc)
            elif self.handler is None:
                response = self.error_response(request, exc)
            elif is_async_callable(self.handler):
                response = await self.handler(request, exc)
            else:
                response = await run_in_threadpool(self.handler, request, exc)  # type: ignore[arg-type]
            if not response_started:
                await response(scope, receive, send)
            # Raised on, as Starlette does: the server logs it.
            raise exc


class Exceptions(ExceptionMiddleware):
    """Starlette's ``ExceptionMiddleware`` (its handlers, looked up alike) with ``send``
    wrapped by a plain function, and the handler's ``Request`` built when one is called."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        scope["starlette.exception_handlers"] = (
            self._exception_handlers,
            self._status_handlers,
        )
        response_started = False

        def sender(message: Message) -> Awaitable[None]:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            return send(message)

        try:
            await self.app(scope, receive, sender)
        except Exception as exc:
            handler: ExceptionHandler | None = None
            if isinstance(exc, HTTPException):
                handler = self._status_handlers.get(exc.status_code)
            if handler is None:
                handler = _handler_of(self._exception_handlers, exc)
            if handler is None:
                raise exc
            if response_started:
                raise RuntimeError(
                    "Caught handled exception, but response already started."
                ) from exc
            response = await _handled(handler, Request(scope, receive, send), exc)
            if response is not None:
                await response(scope, receive, sender)
            # Reused exception instances would accumulate tracebacks across requests.
            exc.__traceback__ = None


def _handler_of(
    handlers: Mapping[Any, ExceptionHandler], exc: Exception
) -> ExceptionHandler | None:
    """The handler of the exception's nearest class that has one (Starlette's lookup)."""
    return next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)


def is_async_callable(obj: Any) -> TypeGuard[Callable[..., Awaitable[Any]]]:
    """Whether calling ``obj`` gives a coroutine (Starlette's test, through partials)."""
    while isinstance(obj, functools.partial):
        obj = obj.func
    return inspect.iscoroutinefunction(obj) or (
        callable(obj) and inspect.iscoroutinefunction(obj.__call__)
    )


async def _handled(handler: ExceptionHandler, conn: Request, exc: Exception) -> Response | None:
    """The handler's answer (a plain function runs in the thread pool, as Starlette does)."""
    if is_async_callable(handler):
        response: Response | None = await handler(conn, exc)
        return response
    return await run_in_threadpool(handler, conn, exc)  # type: ignore[arg-type]


class GatewayStarlette(Starlette):
    """Starlette, its middlewares between ``ServerErrors`` and ``Exceptions`` (built as
    Starlette builds its stack, from the same handlers and settings)."""

    def build_middleware_stack(self) -> ASGIApp:
        error_handler = None
        exception_handlers: dict[Any, ExceptionHandler] = {}
        for key, value in self.exception_handlers.items():
            if key in (500, Exception):
                error_handler = value
            else:
                exception_handlers[key] = value
        middleware = [Middleware(ServerErrors, handler=error_handler, debug=self.debug)]
        if self.max_body_size is not None:
            middleware.append(
                Middleware(RequestBodyLimitMiddleware, max_body_size=self.max_body_size)
            )
        middleware += self.user_middleware
        middleware.append(Middleware(Exceptions, handlers=exception_handlers, debug=self.debug))
        app: ASGIApp = self.router
        for cls, args, kwargs in reversed(middleware):
            app = cls(app, *args, **kwargs)
        return app
