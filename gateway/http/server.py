"""The HTTP server: uvicorn, with bounds on what a client may hold before it is answered.

uvicorn's HTTP/1.1 protocol (httptools) reads headers of any size and waits for them, and for
a body, as long as bytes keep coming. ``BoundedProtocol`` adds, per connection:

- the request line and headers: at most ``max_header_bytes`` (431 beyond), complete within
  ``header_timeout`` of the request's first byte (or of the connection, for its first
  request);
- the body: complete within ``body_timeout`` of the headers — also when the app answered
  early (a 401) and the client keeps trickling the rest.

A bound that runs out answers 408 when nothing has been answered yet, and closes the
connection.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import orjson
import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import GatewayError, HeadersTooLargeError, RequestTimeoutError
from gateway.settings import Settings

__all__ = ["BoundedProtocol", "server_config"]


def _raw_response(error: GatewayError) -> bytes:
    body = orjson.dumps(error.body())
    head = (
        f"HTTP/1.1 {error.status} {error.name}\r\n"
        "content-type: application/json\r\n"
        "cache-control: no-store\r\n"
        "x-content-type-options: nosniff\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class _HeadWithBody:
    """The transport a response is written through: its first write (the status line and
    headers) is held until the next (the body: one write, one segment, one wake-up of the
    client instead of two) or, at the latest, the end of the loop's turn (a streamed
    response's first event may come later)."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._held: bytes | None = b""  # b"": nothing written yet; None: the head is out

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            self._transport.write(data)
        elif held:
            self._held = None
            self._transport.write(held + data)
        else:
            self._held = data
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds above (class attributes, set per server
    by ``server_config``)."""

    max_header_bytes: ClassVar[int] = 16 * 1024
    header_timeout: ClassVar[float] = 10.0
    body_timeout: ClassVar[float] = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The bound running now (loop time; None: none), and the one timer that watches it,
        # set to go off at ``_timer_at``: arming a later bound leaves the timer as it is
        # (when it goes off before the bound, it is set again for the bound), so a request
        # whose bounds follow one another costs no timer of its own.
        self._due: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._reading_headers = True  # no request yet, or one whose headers are coming
        self._requested = False  # a request has begun and not finished arriving
        self._header_bytes = 0
        self._refusal: GatewayError | None = None

    def _arm(self, seconds: float) -> None:
        due = self._due = self.loop.time() + seconds
        if self._timer is not None and self._timer_at <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = self.loop.call_at(due, self._watch), due

    def _disarm(self) -> None:
        self._due = None

    def _watch(self) -> None:
        """The timer went off: the bound has run out when it is due by the timer's time;
        a later bound sets the timer again; with none, nothing is watched."""
        self._timer = None
        if self._due is None:
            return
        if self._due > self._timer_at:
            self._timer, self._timer_at = self.loop.call_at(self._due, self._watch), self._due
            return
        self._due = None
        self._expired()

    def _expired(self) -> None:
        if self.transport.is_closing():
            return
        if self._reading_headers:
            if self._requested:  # an idle connection is closed without a word
                self.transport.write(_raw_response(RequestTimeoutError()))
        elif self.cycle is not None and not self.cycle.response_started:
            self.cycle.disconnected = True  # the app's late answer goes nowhere
            self.transport.write(_raw_response(RequestTimeoutError()))
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._reading_headers and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._refuse(HeadersTooLargeError())

    def _refuse(self, error: GatewayError) -> None:
        self._disarm()
        self.transport.write(_raw_response(error))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        # The parser stopped: at a bound of ours (raised from a callback), or at bad syntax.
        if self._refusal is not None:
            self._refuse(self._refusal)
        else:
            super().send_400_response(msg)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_headers, self._requested, self._header_bytes = True, True, 0
        self._arm(self.header_timeout)

    def on_headers_complete(self) -> None:
        size = len(self.url) + sum(len(k) + len(v) + 4 for k, v in self.headers)
        if size > self.max_header_bytes:
            self._refusal = HeadersTooLargeError()
            raise self._refusal  # stops the parser; send_400_response answers
        self._reading_headers = False
        self._arm(self.body_timeout)
        super().on_headers_complete()
        if self.cycle is not None:
            self.cycle.transport = _HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        self._disarm()
        self._requested = False
        super().on_message_complete()


def server_config(app: ASGIApp, settings: Settings, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for ``gateway serve``: the bounded protocol, no WebSocket
    upgrades (nothing is served over them), no ``Server`` header, no access log of its own
    (``AccessLogMiddleware`` writes one). ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are
    believed only from the proxies of ``GATEWAY_FORWARDED_ALLOW_IPS`` (uvicorn's own default
    would believe any loopback peer, which anyone on the host is); with none listed, the
    connection's peer is the client."""
    protocol = type(
        "BoundedProtocol",
        (BoundedProtocol,),
        {
            "max_header_bytes": settings.max_header_bytes,
            "header_timeout": settings.header_timeout_seconds,
            "body_timeout": settings.body_timeout_seconds,
        },
    )
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=protocol,
        ws="none",
        server_header=False,
        log_config=None,
        access_log=False,
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=list(settings.forwarded_allow_ips) or None,
        **options,
    )
