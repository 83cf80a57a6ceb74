"""`gateway serve`: the HTTP API (and, unless --no-workers, the agents) in one process or in
several forked ones sharing the port, on REDIS_URL or the embedded Redis it starts."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from types import FrameType
from typing import Any

from gateway import gc_pauses
from gateway.cli.embedded import AlreadyServed, with_redis
from gateway.cli.keyring_checks import keys_agree, keys_missing
from gateway.cli.version import log_configuration
from gateway.embedded_redis import EmbeddedRedis
from gateway.redis_supervisor import RedisSupervisor
from gateway.settings import Settings

__all__ = ["serve"]

log = logging.getLogger("gateway")


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # uvicorn re-raises the signal it caught once it has shut down; leaving through
    # SystemExit lets the embedded Redis be stopped on the way out.
    raise SystemExit(0)


def _server(config: Any) -> Any:
    """uvicorn's server, which settles the garbage collector once it has started up."""
    import uvicorn

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            gc_pauses.settle()

        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            # Open streams end first (their clients resubscribe elsewhere): uvicorn waits
            # for every response to finish, and a stream would only end at its deadline.
            state = getattr(getattr(self.config.app, "state", None), "gateway", None)
            if state is not None:
                state.streams.close()
            await super().shutdown(sockets)

    return Server(config)


def _shared_port_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with SO_REUSEPORT: every server process binds its own
    and the kernel spreads new connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _serve_one(settings: Settings, *, shared_port: bool = False, embedded: bool = False) -> int:
    """``embedded``: Redis is the embedded one, part of the gateway: /healthz tells of it."""
    from gateway.app import create_app
    from gateway.http.server import server_config

    config = server_config(
        create_app(settings, redis_embedded=embedded),
        settings,
        timeout_graceful_shutdown=int(settings.shutdown_grace_seconds) + 5,
    )
    sockets = [_shared_port_socket(settings.host, settings.port)] if shared_port else None
    _server(config).run(sockets=sockets)
    return 0


def _child(settings: Settings, index: int, embedded: bool) -> None:
    """A forked server process: serves until stopped, then leaves without the parent's
    clean-up (the embedded Redis is the parent's)."""
    code = 1
    try:
        if settings.metrics_port is not None:  # one metrics port per process
            settings = settings.model_copy(update={"metrics_port": settings.metrics_port + index})
        code = _serve_one(settings, shared_port=True, embedded=embedded)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:
        log.exception("server process failed")
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve_processes(settings: Settings, redis: RedisSupervisor | None) -> int:
    """``settings.processes`` forked server processes on one port; SIGTERM and SIGINT are
    passed on to them. One that exits by itself stops the others: the command ends (non-zero)
    for the supervisor (systemd, the orchestrator) to restart it whole. The embedded Redis
    (``redis``) is watched from here, once the children are forked."""
    _shared_port_socket(settings.host, settings.port).close()  # the port is free: fail here
    children: dict[int, int] = {}
    for index in range(settings.processes):
        pid = os.fork()
        if pid == 0:
            _child(settings, index, redis is not None)
        children[pid] = index
    log.info("server processes started", extra={"processes": settings.processes})
    if redis is not None:
        redis.start()
    stopping = False

    def stop(signum: int, frame: FrameType | None = None) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    while children:
        pid, wait_status = os.wait()
        if children.pop(pid, None) is None:
            continue  # the embedded redis-server: its supervisor starts it again
        code = os.waitstatus_to_exitcode(wait_status)
        if not stopping:
            log.error("a server process exited; stopping the others", extra={"code": code})
            status = 1
            stop(signal.SIGTERM)
    return status


def _embedded(settings: Settings) -> tuple[Settings, EmbeddedRedis | None] | None:
    """``with_redis``: the settings on REDIS_URL or a new embedded redis-server (None,
    logged, when it cannot run)."""
    try:
        return with_redis(settings)
    except AlreadyServed as exc:
        log.error(
            "another `gateway serve` runs the embedded redis-server of this data directory: "
            "stop it first, or use another GATEWAY_DATA_DIR; to add workers to it run "
            "`gateway worker`, and to serve from several processes set REDIS_URL",
            extra={"data_dir": str(exc)},
        )
    except OSError as exc:  # e.g. a read-only or foreign data directory
        log.error(
            "cannot run the embedded redis-server in GATEWAY_DATA_DIR: set REDIS_URL, or "
            "point GATEWAY_DATA_DIR at a directory this user may write",
            extra={"data_dir": settings.data_dir, "error": type(exc).__name__},
        )
    return None


def _serve_on(settings: Settings, redis: RedisSupervisor | None) -> int:
    """Serve on the settings' Redis (``redis``: the embedded one, watched from here)."""
    log_configuration("serve", settings)
    if not keys_agree(settings):
        return 2
    if not settings.serve_embeds and settings.embedder != "none":
        log.warning(
            "GATEWAY_SERVE_EMBEDS is false: user messages are embedded (searchable) once "
            "a `gateway worker` on this Redis takes them; until then they wait queued"
        )
    if settings.processes > 1:
        return _serve_processes(settings, redis)
    if redis is not None:
        redis.start()
    return _serve_one(settings, embedded=redis is not None)


def serve(settings: Settings) -> int:
    if settings.open_mode and not settings.host_is_loopback():
        log.error("refusing to serve without API keys on a non-loopback address")
        return 2
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # Imported before any process is forked: each shares the loaded modules.
    import gateway.app
    import gateway.http.server  # noqa: F401

    if settings.redis_url is not None and keys_missing(settings):
        return 2
    attached = _embedded(settings)
    if attached is None:
        return 2
    settings, embedded = attached
    redis = RedisSupervisor(embedded) if embedded is not None else None
    try:
        return _serve_on(settings, redis)
    finally:
        if redis is not None:
            redis.stop()
