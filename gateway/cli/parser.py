"""The command line's arguments and help: every command, its options and the configuration
it reads."""

from __future__ import annotations

import argparse
from typing import Any

from gateway.cli.version import version

__all__ = ["build"]


_CONFIGURATION = """\
Configuration comes from the environment: GATEWAY_* variables, and REDIS_URL for the
Redis to use (see docs/configuration.md). Without REDIS_URL, `gateway serve` runs an
embedded redis-server under GATEWAY_DATA_DIR (default .data), private to your user and
password-protected; a second `gateway serve` on the same data directory refuses to start."""

_SERVE = """\
Serve the A2A HTTP API and, unless --no-workers is given, run agents in the same process.
Any number of `gateway serve` and `gateway worker` processes may share one Redis."""

_WORKER = """\
Run agents from the durable job queue, without HTTP, next to `gateway serve` processes
(started with --no-workers or not) that share its Redis. Without REDIS_URL it uses the
embedded redis-server that a `gateway serve` with the same GATEWAY_DATA_DIR runs, and
refuses to start when none does. GATEWAY_METRICS_PORT serves Prometheus metrics."""

_CONFIG = """\
Check the environment as `gateway serve` would read it: every invalid value and every
GATEWAY_* variable that is no setting (with the nearest setting's name) on one line each,
never a value; exit 2 when there is any, else print the effective configuration and exit 0."""

_KEYS = """\
Manage the API keys kept in Redis (GATEWAY_API_KEY_SECRET must be the servers' own). A
created or rotated key is printed once, as JSON; only its keyed hash is stored. Keys may be
made for any user, and carry any role: `--role impersonate` lets a tenant admin's key make
keys for that tenant's existing users over /keys. Uses REDIS_URL, or the embedded
redis-server a `gateway serve` runs for GATEWAY_DATA_DIR."""

_ENCRYPTION = """\
Encryption keys of content at rest (GATEWAY_ENCRYPTION_KEYS: a JSON object key id -> base64
of 32 bytes, the first one current, or the path of a file holding it). `generate-key` prints a
keyring with a new key: put it first in GATEWAY_ENCRYPTION_KEYS, keeping the old keys after
it, and restart; then `rotate-data` re-encrypts what the old keys sealed, in the background
of a running gateway, resumable, and reports its progress; it refuses while a live gateway
process does not have the current key. A process whose key of an id the stored data is
sealed with is another key, or lacks such an id, refuses to start. Without REDIS_URL it works
on the embedded redis-server that a `gateway serve` with the same GATEWAY_DATA_DIR runs."""


def _count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError("must be from 1 to 256")
    return value


def build() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="gateway",
        description="An A2A gateway between clinical applications and AI agents.",
        epilog=_CONFIGURATION,
        formatter_class=raw,
    )
    parser.add_argument("--version", action="version", version=f"gateway {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        """A command whose help ends, as the gateway's does, with the configuration."""
        return commands.add_parser(
            name, help=summary, description=description, epilog=_CONFIGURATION, formatter_class=raw
        )

    _serve_parser(command("serve", "serve the HTTP API and run agents", _SERVE))
    _encryption_parser(
        command(
            "encryption",
            "encryption at rest: generate a key, re-encrypt stored data with the current one",
            _ENCRYPTION,
        )
    )
    command("worker", "run agents from the job queue (no HTTP)", _WORKER)
    config = command("config", "check the configuration in the environment", _CONFIG)
    config.add_subparsers(dest="action", required=True, metavar="ACTION").add_parser(
        "check", help="exit 2 when any variable is invalid or unknown (for CI/CD), else 0"
    )
    _keys_parser(commands, raw)
    return parser


def _serve_parser(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--host", help="bind address (default GATEWAY_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default GATEWAY_PORT or 8000)")
    serve.add_argument(
        "--no-workers", action="store_true", help="serve HTTP only; runs happen in workers"
    )
    serve.add_argument(
        "--processes",
        type=_count,
        metavar="N",
        help="server processes sharing the port, e.g. one per core (default GATEWAY_PROCESSES "
        "or 1)",
    )


def _encryption_parser(encryption: argparse.ArgumentParser) -> None:
    actions = encryption.add_subparsers(dest="action", required=True, metavar="ACTION")
    generate = actions.add_parser("generate-key", help="print a keyring with a new random key")
    generate.add_argument("--id", default="k1", help="the new key's id (default k1)")
    actions.add_parser(
        "rotate-data", help="re-encrypt stored content with the current key (resumable)"
    )


def _keys_parser(commands: Any, raw: type[argparse.HelpFormatter]) -> None:
    keys = commands.add_parser(
        "keys", help="manage API keys (create, list, revoke, rotate)", description=_KEYS,
        formatter_class=raw,
    )  # fmt: skip
    actions = keys.add_subparsers(dest="action", required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a key (printed once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--user", required=True)
    create.add_argument("--role", action="append", default=[], help="a role (repeatable)")
    create.add_argument("--name", default="", help="a label for the key")
    create.add_argument("--expires-in", type=int, help="seconds until the key expires")
    listing = actions.add_parser("list", help="list keys (never the keys themselves)")
    listing.add_argument("--tenant", help="only this tenant's")
    revoke = actions.add_parser("revoke", help="revoke a key now")
    revoke.add_argument("key_id")
    rotate = actions.add_parser("rotate", help="replace a key by a new one (printed once)")
    rotate.add_argument("key_id")
    rotate.add_argument(
        "--grace", type=int, default=0, help="seconds the old key keeps working (default 0)"
    )
