"""Request body size limit (pure ASGI): 413 before reading an oversized body, or as soon
as a chunked one passes the limit."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import PayloadTooLargeError
from gateway.http.responses import error_response

__all__ = ["BodyLimitMiddleware"]


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, chunked = None, False
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit():
                declared = int(value)
            elif name == b"transfer-encoding":
                chunked = True
        if declared is not None and declared > self.max_bytes:
            await error_response(PayloadTooLargeError())(scope, receive, send)
            return
        if declared is not None and not chunked:
            # The server reads no more than the length declared (what follows it is the
            # next request), so the body is within the limit: no count needed.
            await self.app(scope, receive, send)
            return
        seen = 0  # a chunked body (whatever length it claims): counted as it arrives

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise PayloadTooLargeError()
            return message

        await self.app(scope, limited, send)
