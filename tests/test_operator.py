"""What an operator meets: `gateway worker` next to `gateway serve` without REDIS_URL."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway import embedded_redis
from tests.conftest import message
from tests.processes import ROOT, serving, slow_process_test, working
from tests.waiting import log_tail


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "REDIS_URL"))}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- gateway worker without REDIS_URL -------------------------------------------------------


def test_a_worker_without_redis_refuses_to_start(tmp_path: Path) -> None:
    done = _cli("worker", GATEWAY_DATA_DIR=str(tmp_path / ".data"))
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
