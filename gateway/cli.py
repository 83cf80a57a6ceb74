"""The ``gateway`` command: ``gateway serve [--host H] [--port P] [--no-workers]``,
``gateway worker``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

import uvicorn
from prometheus_client import start_http_server
from pydantic import ValidationError

from gateway import embedded_redis
from gateway.embedded_redis import EmbeddedRedis
from gateway.http.app import create_app
from gateway.http.server import server_config
from gateway.logs import configure_logging
from gateway.runtime import Runtime
from gateway.settings import Settings

__all__ = ["main"]

log = logging.getLogger("gateway")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the HTTP API and run agents")
    serve.add_argument("--host", help="bind address (default GATEWAY_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default GATEWAY_PORT or 8000)")
    serve.add_argument(
        "--no-workers", action="store_true", help="serve HTTP only; runs happen in workers"
    )
    commands.add_parser("worker", help="run agents from the job queue (no HTTP)")
    return parser


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # uvicorn re-raises the signal it caught once it has shut down; leaving through
    # SystemExit lets the embedded Redis be stopped on the way out.
    raise SystemExit(0)


def _with_redis(settings: Settings) -> tuple[Settings, EmbeddedRedis | None]:
    """Without a Redis URL, the embedded redis-server of the data directory: the one
    another gateway process runs there, else a new one (stopped by the caller)."""
    if settings.redis_url is not None:
        return settings, None
    data = Path(settings.data_dir) / "redis"
    url, embedded = embedded_redis.shared(data, appendfsync=settings.redis_appendfsync)
    if embedded is not None:
        log.info("embedded redis-server started", extra={"port": embedded.port})
    else:
        log.warning(
            "using the embedded redis-server another gateway process runs for this data "
            "directory; it stops when that process does",
            extra={"url": url, "data_dir": str(data)},
        )
    return settings.model_copy(update={"redis_url": url}), embedded


async def _work(settings: Settings) -> None:
    runtime = Runtime.build(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if settings.metrics_port is not None:
        start_http_server(settings.metrics_port, addr=settings.host)
    await runtime.start()
    log.info("worker started", extra={"queue": settings.queue})
    await stop.wait()
    log.info("worker stopping")
    await runtime.stop()


def work(settings: Settings) -> int:
    if settings.queue != "stream":
        log.error("gateway worker needs the durable queue (GATEWAY_QUEUE=stream)")
        return 2
    settings = settings.model_copy(update={"workers": True})
    if settings.redis_url is None:
        # A private Redis would never see the server's jobs: use the server's, or none.
        data = Path(settings.data_dir) / "redis"
        url = embedded_redis.running(data)
        if url is None:
            log.error(
                "no Redis to work from: REDIS_URL is unset and no embedded redis-server "
                "runs for this data directory; start `gateway serve` with the same "
                "GATEWAY_DATA_DIR first, or set REDIS_URL",
                extra={"data_dir": str(data)},
            )
            return 2
        log.info("using the embedded redis-server of the data directory", extra={"url": url})
        settings = settings.model_copy(update={"redis_url": url})
    asyncio.run(_work(settings))
    return 0


def serve(settings: Settings) -> int:
    if settings.open_mode and not settings.host_is_loopback():
        log.error("refusing to serve without API keys on a non-loopback address")
        return 2
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    settings, embedded = _with_redis(settings)
    try:
        config = server_config(
            create_app(settings),
            settings,
            timeout_graceful_shutdown=int(settings.shutdown_grace_seconds) + 5,
        )
        uvicorn.Server(config).run()
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings()
    except ValidationError as exc:
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    if args.command == "worker":
        return work(settings)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if args.no_workers:
        overrides["workers"] = False
    return serve(settings.model_copy(update=overrides))


if __name__ == "__main__":
    sys.exit(main())
