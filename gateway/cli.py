"""The gateway command line: `gateway serve`, `gateway worker`, `gateway keys` (API keys) and
`gateway encryption` (keys of content at rest)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import orjson

import gateway
from gateway import embedded_redis, gc_pauses
from gateway.configuration import (
    ConfigurationError,
    load_settings,
    shown_url,
    summary,
    unknown_variables,
)
from gateway.embedded_redis import EmbeddedRedis
from gateway.logs import configure_logging
from gateway.redis_supervisor import RedisSupervisor
from gateway.settings import Settings

# The server, the runtime and their dependencies are imported by the command that needs
# them: `gateway --help`, `--version` and configuration errors answer at once.

__all__ = ["main"]

log = logging.getLogger("gateway")


_CONFIGURATION = """\
Configuration comes from the environment: GATEWAY_* variables, and REDIS_URL for the
Redis to use (see README.md, Configuration). Without REDIS_URL, `gateway serve` runs an
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

# In the data directory, 0600: the generated keyring of a gateway on the embedded Redis
# whose GATEWAY_ENCRYPTION_KEYS is unset.
KEYS_FILE = "encryption-keys.json"


def version() -> str:
    try:
        return importlib.metadata.version("gateway")
    except importlib.metadata.PackageNotFoundError:
        return gateway.__version__


def _count(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError("must be from 1 to 256")
    return value


def _parser() -> argparse.ArgumentParser:
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

    serve = command("serve", "serve the HTTP API and run agents", _SERVE)
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
    encryption = command(
        "encryption",
        "encryption at rest: generate a key, re-encrypt stored data with the current one",
        _ENCRYPTION,
    )
    actions = encryption.add_subparsers(dest="action", required=True, metavar="ACTION")
    generate = actions.add_parser("generate-key", help="print a keyring with a new random key")
    generate.add_argument("--id", default="k1", help="the new key's id (default k1)")
    actions.add_parser(
        "rotate-data", help="re-encrypt stored content with the current key (resumable)"
    )
    command("worker", "run agents from the job queue (no HTTP)", _WORKER)
    config = command("config", "check the configuration in the environment", _CONFIG)
    config.add_subparsers(dest="action", required=True, metavar="ACTION").add_parser(
        "check", help="exit 2 when any variable is invalid or unknown (for CI/CD), else 0"
    )
    _keys_parser(commands, raw)
    return parser


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


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # uvicorn re-raises the signal it caught once it has shut down; leaving through
    # SystemExit lets the embedded Redis be stopped on the way out.
    raise SystemExit(0)


class _AlreadyServed(Exception):
    """Another `gateway serve` runs the embedded Redis of the data directory."""


def _with_redis(settings: Settings) -> tuple[Settings, EmbeddedRedis | None]:
    """Without a Redis URL, a new embedded redis-server in the data directory (stopped by
    the caller); refused (``_AlreadyServed``) while another gateway process runs one there."""
    if settings.redis_url is not None:
        return settings, None
    embedded_redis.private_directory(Path(settings.data_dir))
    data = Path(settings.data_dir) / "redis"
    url, embedded = embedded_redis.shared(data, appendfsync=settings.redis_appendfsync)
    if embedded is None:
        raise _AlreadyServed(str(data))
    log.info("embedded redis-server started", extra={"port": embedded.port})
    return settings.model_copy(update={"redis_url": url, **_embedded(settings)}), embedded


def _embedded(settings: Settings) -> dict[str, object]:
    """What the embedded Redis turns on by default: rewriting its files after a scrub, and
    encryption with a keyring generated into the data directory (``KEYS_FILE``, 0600)."""
    update: dict[str, object] = {}
    if settings.scrub_rewrite == "auto":
        update["scrub_rewrite"] = "on"
    if settings.encryption == "on" and settings.encryption_keys is None:
        from pydantic import SecretStr

        from gateway.store.sealing import generate_keyring

        path = embedded_redis.private_directory(Path(settings.data_dir)) / KEYS_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(generate_keyring() + "\n")
            log.info("encryption key generated", extra={"path": str(path)})
        update["encryption_keys"] = SecretStr(str(path.resolve()))
    return update


def _keys_missing(settings: Settings) -> bool:
    if settings.encryption == "on" and settings.encryption_keys is None:
        log.error(
            "GATEWAY_ENCRYPTION_KEYS is required with REDIS_URL: generate a keyring with "
            "`gateway encryption generate-key`, or set GATEWAY_ENCRYPTION=off to store content "
            "in clear"
        )
        return True
    return False


async def _verify_keys(settings: Settings) -> None:
    from gateway.store.connection import RedisTarget
    from gateway.store.key_registry import KeyRegistry
    from gateway.store.sealing import sealer_for

    assert settings.redis_url is not None
    client = RedisTarget.parse(settings.redis_url, settings.redis_cluster).client(
        settings.redis_timeout_seconds
    )
    try:
        await KeyRegistry(client, sealer_for(settings)).verify()
    finally:
        await client.aclose()


def _keys_agree(settings: Settings) -> bool:
    """Whether GATEWAY_ENCRYPTION_KEYS opens what the Redis holds (``key_registry.py``);
    logged, in one line, when not. An unreachable Redis is the runtime's to report."""
    from redis.exceptions import RedisError

    from gateway.store.key_registry import ForeignKeyError

    try:
        asyncio.run(_verify_keys(settings))
    except ForeignKeyError as exc:
        log.error("refusing to start: %s", exc)
        return False
    except (RedisError, OSError):
        pass
    return True


def _log_configuration(command: str, settings: Settings) -> None:
    log.info(
        "effective configuration",
        extra={"command": command, "version": version(), "config": summary(settings)},
    )


async def _work(settings: Settings) -> None:
    from prometheus_client import start_http_server

    from gateway.runtime import Runtime

    runtime = Runtime.build(settings, serving=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if settings.metrics_port is not None:
        start_http_server(settings.metrics_port, addr=settings.host)
    await runtime.start()
    gc_pauses.settle()
    log.info("worker started", extra={"queue": settings.queue})
    await stop.wait()
    log.info("worker stopping")
    await runtime.stop()


def work(settings: Settings) -> int:
    if settings.queue != "stream":
        log.error("gateway worker needs the durable queue (GATEWAY_QUEUE=stream)")
        return 2
    settings = settings.model_copy(update={"workers": True})
    attached = _attach(settings)
    if attached is None or not _keys_agree(attached):
        return 2
    _log_configuration("worker", attached)
    asyncio.run(_work(attached))
    return 0


def _attach(settings: Settings) -> Settings | None:
    """REDIS_URL, or the embedded Redis a `gateway serve` runs for the data directory (None,
    logged, when there is neither)."""
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
            return None
        log.info(
            "using the embedded redis-server of the data directory",
            extra={"url": shown_url(url)},
        )
        return settings.model_copy(update={"redis_url": url, **_embedded(settings)})
    return None if _keys_missing(settings) else settings


def encryption(settings: Settings, action: str, key_id: str) -> int:
    if action == "generate-key":
        from gateway.store.sealing import generate_keyring

        print(generate_keyring(key_id))
        return 0
    attached = _attach(settings)
    if attached is None:
        return 2
    if attached.encryption_keys is None:
        log.error("no keys to rotate to: GATEWAY_ENCRYPTION_KEYS is unset")
        return 2
    from gateway.store.rotation import rotate_data
    from gateway.store.sealing import KeyringError

    try:
        asyncio.run(rotate_data(attached))
    except KeyringError as exc:
        log.error("rotation refused: %s", exc)
        return 2
    return 0


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


def serve(settings: Settings) -> int:
    if settings.open_mode and not settings.host_is_loopback():
        log.error("refusing to serve without API keys on a non-loopback address")
        return 2
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # Imported before any process is forked: each shares the loaded modules.
    import gateway.app
    import gateway.http.server  # noqa: F401

    if settings.redis_url is not None and _keys_missing(settings):
        return 2
    try:
        settings, embedded = _with_redis(settings)
    except _AlreadyServed as exc:
        log.error(
            "another `gateway serve` runs the embedded redis-server of this data directory: "
            "stop it first, or use another GATEWAY_DATA_DIR; to add workers to it run "
            "`gateway worker`, and to serve from several processes set REDIS_URL",
            extra={"data_dir": str(exc)},
        )
        return 2
    except OSError as exc:  # e.g. a read-only or foreign data directory
        log.error(
            "cannot run the embedded redis-server in GATEWAY_DATA_DIR: set REDIS_URL, or "
            "point GATEWAY_DATA_DIR at a directory this user may write",
            extra={"data_dir": settings.data_dir, "error": type(exc).__name__},
        )
        return 2
    redis = RedisSupervisor(embedded) if embedded is not None else None
    try:
        _log_configuration("serve", settings)
        if not _keys_agree(settings):
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
    finally:
        if redis is not None:
            redis.stop()


async def _manage_keys(settings: Settings, args: argparse.Namespace) -> Any:
    from gateway.canonical import created_key_json, key_json, key_list_json
    from gateway.service.keys import KeyService
    from gateway.store.apikeys_store import ApiKeyStore
    from gateway.store.connection import RedisTarget
    from gateway.store.lua import Scripts

    assert settings.redis_url is not None and settings.api_key_secret is not None
    target = RedisTarget.from_settings(settings)
    client = target.client(settings.redis_timeout_seconds)
    service = KeyService(
        ApiKeyStore(client, Scripts.register(client)),
        settings.api_key_secret.get_secret_value().encode(),
    )
    try:
        if args.action == "list":
            return key_list_json(await service.list(args.tenant))
        if args.action == "create":
            out = created_key_json(
                await service.create(args.tenant, args.user, args.role, args.name, args.expires_in)
            )
        elif args.action == "revoke":
            out = key_json(await service.revoke(None, args.key_id))
        else:
            out = created_key_json(await service.rotate(None, args.key_id, args.grace))
        if settings.audit:  # key changes are on record, whoever makes them
            await _audit_key_change(settings, client, args.action, out)
        return out
    finally:
        await client.aclose()


async def _audit_key_change(settings: Settings, client: Any, action: str, key: Any) -> None:
    import getpass

    from gateway.audit.entry import AuditEntry
    from gateway.store.assembly import now_ms
    from gateway.store.audit_store import AuditStore

    store = AuditStore(client, settings.audit_max_entries, settings.audit_max_age_seconds)
    entry = AuditEntry(
        time_ms=now_ms(),
        tenant=key["tenant"],
        user=getpass.getuser(),
        credential="cli",
        operation=f"{action}_key",
        method="CLI",
        status=200,
        request_id="",
        ids={"key": key["id"]},
    )
    await store.append([entry])


def keys(settings: Settings, args: argparse.Namespace) -> int:
    from gateway.errors import GatewayError

    if settings.api_key_secret is None:
        print("gateway keys: GATEWAY_API_KEY_SECRET is not set", file=sys.stderr)
        return 2
    if settings.redis_url is None:
        url = embedded_redis.running(Path(settings.data_dir) / "redis")
        if url is None:
            print("gateway keys: REDIS_URL is unset and no embedded redis-server runs for "
                  "this data directory", file=sys.stderr)  # fmt: skip
            return 2
        settings = settings.model_copy(update={"redis_url": url})
    try:
        out = asyncio.run(_manage_keys(settings, args))
    except GatewayError as exc:
        print(f"gateway keys: {exc.message}", file=sys.stderr)
        return 1
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
    return 0


def check_configuration() -> int:
    """`gateway config check`: every problem of the environment, or the configuration."""
    problems = unknown_variables(os.environ)
    try:
        settings = load_settings()
    except ConfigurationError as exc:
        problems = exc.problems + problems
    if problems:
        for problem in problems:
            print(f"gateway: invalid configuration: {problem}", file=sys.stderr)
        return 2
    print(orjson.dumps(summary(settings), option=orjson.OPT_INDENT_2).decode())
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "config":
        return check_configuration()
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
        return keys(settings, args)
    gc_pauses.watch()
    if args.command == "worker":
        return work(settings)
    if args.command == "encryption":
        return encryption(settings, args.action, getattr(args, "id", "k1"))
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if args.no_workers:
        overrides["workers"] = False
    if args.processes is not None:
        overrides["processes"] = args.processes
    return serve(settings.model_copy(update=overrides))


if __name__ == "__main__":
    sys.exit(main())
