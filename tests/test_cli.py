"""`gateway serve` as a user runs it: a real process, embedded Redis, graceful shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from redis import Redis

from gateway import embedded_redis
from gateway.store.keys import JOBS, JOBS_GROUP
from tests.conftest import AppFactory, message
from tests.processes import PROCESS_SECONDS, serving, slow_process_test
from tests.waiting import until


@slow_process_test
def test_serve_with_embedded_redis_and_clean_stop(tmp_path: Path) -> None:
    with serving(tmp_path) as (proc, base):
        r = httpx.post(f"{base}/v1/message:send", json={"message": message("hello")}, timeout=10)
        assert r.status_code == 200
        assert r.json()["task"]["status"]["state"] == "completed"
        assert httpx.get(f"{base}/.well-known/agent-card.json").json()["url"] == base
        # Garbage collector pauses are measured from start-up on (the full collection that
        # precedes freezing the start-up heap is one of them).
        metrics = httpx.get(f"{base}/metrics").text
        assert 'gateway_gc_pause_seconds_count{generation="2"}' in metrics
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=PROCESS_SECONDS) == 0
    assert (tmp_path / ".data" / "redis").is_dir()
    assert any((tmp_path / ".data" / "redis").rglob("*.aof"))
    logs = next(tmp_path.glob("serve-*.log")).read_text()
    assert "hello" not in logs  # message text never reaches the logs
    assert '"event":"request"' in logs


@slow_process_test
def test_a_server_told_not_to_embed_says_where_messages_wait(tmp_path: Path) -> None:
    """``GATEWAY_SERVE_EMBEDS=false`` is announced at start-up: without a ``gateway worker``
    the messages stay queued, unsearchable."""
    env = {"GATEWAY_SERVE_EMBEDS": "false", "GATEWAY_EMBEDDER": "hashing"}
    with serving(tmp_path, **env) as (proc, base):
        r = httpx.post(f"{base}/v1/message:send", json={"message": message("hello")}, timeout=10)
        cid = r.json()["task"]["contextId"]
        memory = httpx.get(f"{base}/v1/contexts/{cid}", timeout=10).json()["memory"]
        assert memory == {"indexed": 0, "pending": 1}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=PROCESS_SECONDS) == 0
    logs = next(tmp_path.glob("serve-*.log")).read_text()
    assert "GATEWAY_SERVE_EMBEDS is false" in logs and '"serve_embeds":false' in logs


@slow_process_test
def test_several_processes_share_one_port_and_one_redis(tmp_path: Path) -> None:
    """`--processes 2`: two server processes on one port (SO_REUSEPORT) and one Redis; sends
    on new connections are spread over both (each runs the sends it takes, as its own job
    consumer); SIGTERM stops both."""
    with serving(tmp_path, "--processes", "2") as (proc, base):
        for i in range(20):
            with httpx.Client() as client:  # a new connection each time
                r = client.post(
                    f"{base}/v1/message:send", json={"message": message(f"m{i}")}, timeout=30
                )
            assert r.json()["task"]["status"]["state"] == "completed"
        url = embedded_redis.running(tmp_path / ".data" / "redis")  # with its password
        assert url is not None
        with Redis.from_url(url) as redis:
            consumers = redis.xinfo_consumers(JOBS, JOBS_GROUP)
        pids = {int(c["name"].decode().split(":")[1]) for c in consumers}
        assert len(pids) == 2 and proc.pid not in pids  # the parent only supervises
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=PROCESS_SECONDS) == 0
    logs = next(tmp_path.glob("serve-*.log")).read_text()
    assert logs.count("Finished server process") == 2


@slow_process_test
def test_open_mode_refuses_a_public_bind(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
        env=env,
        capture_output=True,
        timeout=PROCESS_SECONDS,
    )
    assert done.returncode == 2
    assert b"refusing" in done.stderr


@slow_process_test
def test_invalid_configuration_fails_fast(tmp_path: Path) -> None:
    env = {**os.environ, "GATEWAY_CONTEXT_TTL_SECONDS": "soon"}
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve"],
        env=env,
        capture_output=True,
        timeout=PROCESS_SECONDS,
    )
    assert done.returncode == 2
    assert b"GATEWAY_CONTEXT_TTL_SECONDS" in done.stderr


@slow_process_test
async def test_sigterm_lets_in_flight_runs_finish(
    tmp_path: Path, redis_url: str, make_app: AppFactory
) -> None:
    with serving(tmp_path, REDIS_URL=redis_url) as (proc, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as c:
            body = {
                "message": message("x", metadata={"echo": {"delayMs": 2000}}),
                "configuration": {"blocking": False},
            }
            task = (await c.post("/v1/message:send", json=body)).json()["task"]

            async def in_flight() -> bool:
                state = (await c.get(f"/v1/tasks/{task['id']}")).json()["status"]["state"]
                assert state != "completed", "the run ended before the stop (too fast to test)"
                return bool(state == "working")

            await until(in_flight, what="the run to start", logs=tmp_path)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, PROCESS_SECONDS) == 0
    async with make_app() as c:
        got = (await c.get(f"/v1/tasks/{task['id']}")).json()
    assert got["status"]["state"] == "completed"
