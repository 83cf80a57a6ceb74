"""The ``gateway`` command: ``gateway serve [--host H] [--port P]``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

import uvicorn
from pydantic import ValidationError

from gateway.embedded_redis import EmbeddedRedis
from gateway.http.app import create_app
from gateway.logs import configure_logging
from gateway.settings import Settings

__all__ = ["main"]

log = logging.getLogger("gateway")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve the HTTP API and run agents")
    serve.add_argument("--host", help="bind address (default GATEWAY_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default GATEWAY_PORT or 8000)")
    return parser


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # uvicorn re-raises the signal it caught once it has shut down; leaving through
    # SystemExit lets the embedded Redis be stopped on the way out.
    raise SystemExit(0)


def serve(settings: Settings) -> int:
    if settings.open_mode and not settings.host_is_loopback():
        log.error("refusing to serve without API keys on a non-loopback address")
        return 2
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    embedded: EmbeddedRedis | None = None
    if settings.redis_url is None:
        embedded = EmbeddedRedis(Path(settings.data_dir) / "redis")
        settings = settings.model_copy(update={"redis_url": embedded.start()})
        log.info("embedded redis-server started", extra={"port": embedded.port})
    try:
        config = uvicorn.Config(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
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
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    return serve(settings.model_copy(update=overrides))


if __name__ == "__main__":
    sys.exit(main())
