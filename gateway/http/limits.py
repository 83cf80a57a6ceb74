"""Request body size limit (pure ASGI): 413 before reading an oversized body, or as soon
as a chunked one passes the limit."""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import PayloadTooLargeError
from gateway.http.responses import error_response

__all__ = ["BodyLimitMiddleware"]


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # The app's awaitable, not awaited here (see stack.py).
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        declared, chunked = None, False
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit():
                declared = int(value)
            elif name == b"transfer-encoding":
                chunked = True
        if declared is not None and declared > self.max_bytes:
            return error_response(PayloadTooLargeError())(scope, receive, send)
        if declared is not None and not chunked:
            # The server reads no more than the length declared (what follows it is the
            # next request), so the body is within the limit: no count needed.
            return self.app(scope, receive, send)
        seen = 0  # a chunked body (whatever length it claims): counted as it arrives

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise PayloadTooLargeError()
            return message

        return self.app(scope, limited, send)
