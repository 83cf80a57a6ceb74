"""A run's writes ride out a short Redis outage instead of abandoning the run; a Redis
that hangs or forgets its scripts costs requests a 503 or nothing, never a stuck gateway."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded_redis import EmbeddedRedis
from tests.conftest import AppFactory, RawRedis, post_message
from tests.waiting import until


@pytest.mark.timeout(120)
async def test_a_run_finishing_during_a_redis_restart_is_stored_and_answered(
    make_app: AppFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    server.start()
    caplog.set_level(logging.WARNING, logger="gateway.runs")
    try:
        # A lease far longer than the test: only the run's own retries can finish it in time.
        async with make_app(
            redis_url=server.url, job_lease_seconds=300, redis_timeout_seconds=1
        ) as c:
            sent = asyncio.create_task(
                post_message(c, "outage", metadata={"echo": {"delayMs": 300}})
            )

            async def working() -> bool:
                r = await c.get("/v1/contexts")
                items = r.json().get("items", []) if r.status_code == 200 else []
                return bool(items)

            await until(working, what="the send to be stored")
            assert server.process is not None
            server.process.send_signal(signal.SIGKILL)
            server.process.wait(timeout=10)

            def retrying() -> bool:
                return any("retrying the run's write" in r.getMessage() for r in caplog.records)

            await until(retrying, what="the run to retry its write")
            server.start()
            r = await asyncio.wait_for(sent, 60)
            assert r.status_code == 200, r.text
            task: dict[str, Any] = r.json()["task"]
            assert task["status"]["state"] == "completed"
            assert task["artifacts"][0]["parts"][0]["text"] == "outage"
            assert not any("store unavailable during run" in m for m in caplog.messages)
    finally:
        server.stop()


@pytest.mark.timeout(120)
async def test_a_hung_redis_gets_503s_within_its_timeout_then_sends_go_on(
    make_app: AppFactory, tmp_path: Path
) -> None:
    """Redis stopped with its connections open (SIGSTOP): a send fails with 503 after the
    Redis timeout instead of hanging, and once Redis answers again sends succeed on a new
    connection, without restarting the gateway."""
    server = EmbeddedRedis(tmp_path / "redis")
    server.start()
    try:
        async with make_app(redis_url=server.url, redis_timeout_seconds=1) as c:
            assert (await post_message(c, "before")).status_code == 200
            assert server.process is not None
            server.process.send_signal(signal.SIGSTOP)
            try:
                hung = await asyncio.wait_for(post_message(c, "hung"), 30)
            finally:
                server.process.send_signal(signal.SIGCONT)
            assert hung.status_code == 503, hung.text

            async def answered() -> bool:
                r = await post_message(c, "after")
                return r.status_code == 200 and r.json()["task"]["status"]["state"] == "completed"

            await until(answered, what="sends to succeed once Redis answers")
    finally:
        server.stop()


async def test_sends_go_on_after_redis_forgets_its_scripts(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """A Redis that lost its scripts (a restart without them, SCRIPT FLUSH, a failover to a
    replica that never ran them) gets them again from the first send that needs them."""
    async with make_app() as c:
        assert (await post_message(c, "before")).status_code == 200
        await redis.script_flush()
        r = await post_message(c, "after")
        assert r.status_code == 200, r.text
        assert r.json()["task"]["artifacts"][0]["parts"][0]["text"] == "after"
