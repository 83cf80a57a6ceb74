"""Exception handlers: every failure leaves as a protocol error body, never a trace."""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match, Route

from gateway.errors import GatewayError, MethodNotFoundError
from gateway.http.responses import error_response

__all__ = ["EXCEPTION_HANDLERS"]

log = logging.getLogger("gateway.http")


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return error_response(exc)


def _allowed(request: Request) -> str:
    """Every method some route serves on this path (Starlette names only the first route's)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        if (
            isinstance(route, Route)
            and route.methods
            and route.matches(request.scope)[0] != Match.NONE
        ):
            methods |= route.methods
    return ", ".join(sorted(methods))


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        error = MethodNotFoundError("Method not allowed on this path")
        response = error_response(error)
        response.status_code = 405
        response.headers["Allow"] = _allowed(request)
        return response
    return error_response(MethodNotFoundError("No such route"))


async def _client_gone(request: Request, exc: Exception) -> Response:
    # The client closed the connection (or the server did, at a read deadline) before its
    # body arrived: nobody is left to answer, and nothing went wrong here.
    return Response(status_code=400)


async def _unexpected(request: Request, exc: Exception) -> Response:
    route = getattr(request.scope.get("route"), "path", "unmatched")  # the template, not the path
    log.error("unhandled error", extra={"error": type(exc).__name__, "route": route})
    return error_response(GatewayError())


EXCEPTION_HANDLERS = {
    GatewayError: _gateway_error,
    ClientDisconnect: _client_gone,
    HTTPException: _http_exception,
    Exception: _unexpected,
}
