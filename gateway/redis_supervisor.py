"""Keeps the embedded ``redis-server`` of `gateway serve` running.

A server that exits while it is not being stopped (killed, crashed, out of memory) is
started again at once, then with backoff while it fails to start: on the same port and
unix socket, with the same data directory and password, so it reloads its append-only
file (what it acknowledged is there again) and the gateway's connections resume by
themselves. Meanwhile requests are answered 503, and so is ``/healthz``: a supervisor
that probes it restarts the gateway if Redis never comes back.

The watch is a thread of the process that started the server (the parent of the server
processes of ``--processes``): it waits on the server's process, and the servers it
restarts are its children, which ``PR_SET_PDEATHSIG`` ties to it.
"""

from __future__ import annotations

import logging
import threading

from gateway.backoff import Backoff
from gateway.embedded_redis import EmbeddedRedis, locked

__all__ = ["RedisSupervisor"]

log = logging.getLogger("gateway")


class RedisSupervisor:
    def __init__(self, server: EmbeddedRedis, *, first: float = 0.2, cap: float = 5.0) -> None:
        self.server = server
        self._backoff = Backoff(first, cap)
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # a restart and a stop never overlap
        self._thread: threading.Thread | None = None
        self.restarts = 0

    def start(self) -> None:
        """Watch the server (started already) from a thread of this process."""
        self._thread = threading.Thread(target=self._watch, name="embedded-redis", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching, then stop the server."""
        self._stopping.set()
        with self._lock:
            self.server.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _watch(self) -> None:
        while not self._stopping.is_set():
            process = self.server.process
            if process is None:
                return
            code = process.wait()  # 0 when another wait of this process reaped it first
            if self._stopping.is_set():
                return
            log.error("embedded redis-server exited; restarting it", extra={"code": code})
            self._restart()

    def _restart(self) -> None:
        """Start the server again, retrying with backoff until it answers or stopping."""
        while not self._stopping.is_set():
            with self._lock:
                if self._stopping.is_set():
                    return
                try:
                    with locked(self.server.data_dir):
                        self.server.restart()
                except (RuntimeError, OSError) as exc:
                    log.error(
                        "embedded redis-server did not start; retrying",
                        extra={"error": type(exc).__name__},
                    )
                else:
                    self.restarts += 1
                    self._backoff.reset()
                    log.info("embedded redis-server restarted", extra={"port": self.server.port})
                    return
            self._stopping.wait(self._backoff.next())
