"""The lifecycle every test double shares: an ASGI app served by uvicorn on 127.0.0.1, on
a free port, in a thread of its own."""

from __future__ import annotations

import threading
from typing import Any, Self

import uvicorn

from gateway.embedded_redis import free_port
from tests.waiting import until_sync


class ServedDouble:
    def __init__(
        self, host: str = "127.0.0.1", port: int | None = None, tls: tuple[str, str] | None = None
    ) -> None:
        """On ``host`` (a loopback address), at ``port`` (a free one if None); over https
        with ``tls``, a certificate file and its key's."""
        self.host, self.port = host, port if port is not None else free_port()
        self._tls = tls
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def serve(self, app: Any) -> None:
        """Called by a subclass's constructor with the app to serve."""
        certificate, key = self._tls or (None, None)
        config = uvicorn.Config(
            app,
            host=self.host,
            port=self.port,
            log_level="warning",
            ssl_certfile=certificate,
            ssl_keyfile=key,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def start(self) -> Self:
        assert self._server is not None and self._thread is not None
        self._thread.start()
        server = self._server
        until_sync(
            lambda: server.started, what=f"{type(self).__name__} on port {self.port}", every=0.01
        )
        return self

    def stop(self) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)
