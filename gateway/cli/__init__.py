"""The gateway command line: `gateway serve`, `gateway worker`, `gateway keys` (API keys) and
`gateway encryption` (keys of content at rest)."""

from __future__ import annotations

import logging
import os
import sys

from gateway import gc_pauses
from gateway.cli import config_check, encryption, keys, parser, serve, worker
from gateway.configuration import ConfigurationError, load_settings, unknown_variables
from gateway.logs import configure_logging

# The server, the runtime and their dependencies are imported by the command that needs
# them: `gateway --help`, `--version` and configuration errors answer at once.

__all__ = ["main"]

log = logging.getLogger("gateway")


def main(argv: list[str] | None = None) -> int:
    args = parser.build().parse_args(argv)
    if args.command == "config":
        return config_check.check_configuration()
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        for problem in exc.problems:
            print(f"gateway: invalid configuration: {problem}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    for unknown in unknown_variables(os.environ):
        log.warning(unknown)
    if args.command == "keys":
        return keys.keys(settings, args)
    gc_pauses.watch()
    if args.command == "worker":
        return worker.work(settings)
    if args.command == "encryption":
        return encryption.encryption(settings, args.action, getattr(args, "id", "k1"))
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if args.no_workers:
        overrides["workers"] = False
    if args.processes is not None:
        overrides["processes"] = args.processes
    return serve.serve(settings.model_copy(update=overrides))
