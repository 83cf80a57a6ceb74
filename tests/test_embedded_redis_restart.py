"""The embedded Redis of `gateway serve` is part of the gateway: `/healthz` fails while it
does not answer, and when it dies the gateway starts it again, with its data."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.conftest import message
from tests.processes import serving, slow_process_test
from tests.test_openapi import conform
from tests.waiting import log_tail, until_sync

ENV = {"GATEWAY_EMBEDDER": "none", "GATEWAY_REDIS_TIMEOUT_SECONDS": "1"}


def _redis_child(parent: int) -> int:
    """The pid of the redis-server process ``parent`` started."""
    for proc in Path("/proc").iterdir():
        try:
            stat = (proc / "stat").read_text()
            exe = os.readlink(proc / "exe")
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        if ppid == parent and exe.endswith("redis-server"):
            return int(proc.name)
    raise AssertionError(f"no redis-server child of {parent}")


def _started_processes(tmp: Path) -> int:
    """How many server processes have logged the end of their start-up."""
    return sum(
        log.read_text(errors="replace").count("Application startup complete")
        for log in tmp.glob("serve-*.log")
    )


def _health(c: httpx.Client) -> int | None:
    try:
        return c.get("/healthz").status_code
    except httpx.TransportError:
        return None


@slow_process_test
@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_killed_embedded_redis_is_restarted_with_its_data(tmp_path: Path, processes: str) -> None:
    """With one server process or several (their parent runs the Redis)."""
    args = ("--processes", processes)
    with (
        serving(tmp_path, *args, **ENV) as (proc, base),
        httpx.Client(base_url=base, timeout=30) as c,
    ):
        # every server process has started (one answering /readyz says nothing of the
        # others), so none is still starting when Redis stops answering below
        until_sync(
            lambda: _started_processes(tmp_path) >= int(processes),
            what=f"{processes} server processes to start",
            logs=tmp_path,
        )
        r = c.post("/v1/message:send", json={"message": message("before the crash")})
        assert r.status_code == 200, r.text
        task = r.json()["task"]
        redis = _redis_child(proc.pid)
        assert _health(c) == 200
        # Unreachable (stopped): liveness says so, as readiness does.
        os.kill(redis, signal.SIGSTOP)
        until_sync(lambda: _health(c) == 503, what="/healthz to fail", logs=tmp_path)
        down = c.get("/healthz")
        assert down.status_code == 503 and down.headers["retry-after"] == "1"
        conform(down, "/healthz")
        assert c.get("/readyz").status_code == 503
        # Dead: the gateway starts it again, on its data.
        os.kill(redis, signal.SIGKILL)
        until_sync(lambda: _health(c) == 200, what="/healthz to recover", logs=tmp_path)
        assert _redis_child(proc.pid) != redis
        got = c.get(f"/v1/tasks/{task['id']}")
        assert got.status_code == 200, got.text
        assert got.json()["status"]["state"] == "completed"
        again = c.post(
            "/v1/message:send",
            json={"message": message("after", contextId=task["contextId"])},
        )
        assert again.status_code == 200, again.text + log_tail(tmp_path)
        assert proc.poll() is None
    text = "".join(p.read_text() for p in tmp_path.glob("serve-*.log"))
    assert "embedded redis-server exited; restarting it" in text
    assert "embedded redis-server restarted" in text
