"""Exception handlers: every failure leaves as a protocol error body, never a trace."""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.errors import GatewayError, MethodNotFoundError
from gateway.http.responses import error_response

__all__ = ["EXCEPTION_HANDLERS"]

log = logging.getLogger("gateway.http")


async def _gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return error_response(exc)


async def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        error = MethodNotFoundError("Method not allowed on this path")
        response = error_response(error)
        response.status_code = 405
        return response
    return error_response(MethodNotFoundError("No such route"))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unhandled error", extra={"error": type(exc).__name__, "path": request.url.path})
    return error_response(GatewayError())


EXCEPTION_HANDLERS = {
    GatewayError: _gateway_error,
    HTTPException: _http_exception,
    Exception: _unexpected,
}
