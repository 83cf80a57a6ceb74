"""Request ids and one structured access-log line per request (ids and timings only)."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.metrics import REQUESTS

__all__ = ["AccessLogMiddleware"]

log = logging.getLogger("gateway.access")
# A client's own request id is kept (echoed and logged) only when it is short and plain,
# all of it: a trailing line break would forge a log line or break the response header.
_SAFE_ID = re.compile(rb"[A-Za-z0-9._-]{1,64}")


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp, enabled: bool = True) -> None:
        self.app, self.enabled = app, enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = next(
            (v for k, v in scope["headers"] if k == b"x-request-id" and _SAFE_ID.fullmatch(v)),
            uuid.uuid4().hex.encode(),
        )
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", request_id)]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            REQUESTS.labels(scope["method"], str(status)).inc()
            if self.enabled:
                log.info(
                    "request",
                    extra={
                        "request_id": request_id.decode(),
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": status,
                        "ms": round((time.perf_counter() - started) * 1000, 2),
                    },
                )
