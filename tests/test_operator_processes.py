"""What an operator meets while the gateway runs: quiet logs while idle, its configuration
logged once, `gateway worker` next to `gateway serve` without REDIS_URL, and processes
started before their Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
from redis.asyncio import Redis

from gateway import embedded_redis
from gateway.store.keys import MAINTENANCE_LEADER
from tests.conftest import message
from tests.operator_secrets import SECRET_VALUES, SECRETS
from tests.processes import (
    PROCESS_SECONDS,
    answers_ready,
    gateway_cli,
    launch,
    serving,
    slow_process_test,
    stop,
    working,
)
from tests.waiting import log_tail, stays, until, until_sync

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


# --- started before Redis -----------------------------------------------------------------


@slow_process_test
def test_a_gateway_started_before_its_redis_waits_for_it_then_serves(tmp_path: Path) -> None:
    redis = embedded_redis.EmbeddedRedis(tmp_path / "redis", password=False)
    url = f"redis://127.0.0.1:{redis.port}/0"  # nothing listens there yet
    proc, base, log_path = launch(tmp_path, REDIS_URL=url, GATEWAY_REDIS_STARTUP_SECONDS="600")
    try:
        waits = b"Redis not answering yet; start-up waits"
        until_sync(lambda: waits in log_path.read_bytes(), what="the wait logged", logs=log_path)
        assert proc.poll() is None, log_tail(log_path)
        redis.start()
        until_sync(
            lambda: answers_ready(base),
            timeout=PROCESS_SECONDS,
            what="the gateway ready",
            logs=log_path,
        )
        r = httpx.post(f"{base}/v1/message:send", json={"message": message("hi")}, timeout=60)
        assert r.json()["task"]["status"]["state"] == "completed", log_tail(log_path)
    finally:
        stop(proc)
        redis.stop()


@slow_process_test
def test_a_process_whose_redis_never_answers_exits_after_its_startup_wait() -> None:
    url = f"redis://127.0.0.1:{embedded_redis.free_port()}/0"
    done = gateway_cli(
        "worker", REDIS_URL=url, GATEWAY_ENCRYPTION="off", GATEWAY_REDIS_STARTUP_SECONDS="1"
    )
    assert done.returncode == 1, done.stderr
    assert "Redis not answering yet; start-up waits" in done.stderr
    assert "Redis did not answer within 1 s (GATEWAY_REDIS_STARTUP_SECONDS)" in done.stderr
    assert "Traceback" not in done.stderr
