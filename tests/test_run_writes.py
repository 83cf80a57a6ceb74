"""A run's writes ride out a short Redis outage instead of abandoning the run."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path
from typing import Any

import pytest

from gateway.embedded_redis import EmbeddedRedis
from tests.conftest import AppFactory, post_message
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
