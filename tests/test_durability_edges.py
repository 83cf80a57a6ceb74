"""Edges of durable execution: how soon a killed process's runs resume."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from gateway.store.keys import JOBS, JOBS_GROUP, MAINTENANCE_LEADER
from tests.conftest import message
from tests.processes import serving


async def _until(
    check: Callable[[], Awaitable[Any]],
    seconds: float = 30.0,
    every: float = 0.05,
    logs: Path | None = None,
) -> Any:
    """Poll ``check`` until it returns something truthy; on time-out fail with the tail of
    every process log under ``logs``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(every)
    tails = "".join(
        f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted((logs or Path()).glob("*.log"))
    )
    raise AssertionError(f"condition not met in {seconds} s{tails if logs else ''}")


def _send(c: httpx.AsyncClient, *parts: str, agent: str = "echo", **fields: Any) -> Any:
    config = fields.pop("configuration", None)
    body: dict[str, Any] = {"message": message(*parts, **fields)}
    if config:
        body["configuration"] = config
    return c.post(f"/agents/{agent}/v1/message:send", json=body, timeout=30)


# -- a killed process's runs -----------------------------------------------------------------

# The lease is long enough that a leader lock outliving its holder by half a lease (the old
# design: 1.5 × lease, then up to half a lease more before another process noticed) lands
# past the asserted bound, and short enough for a test.
LEASE = 24.0
SLACK = 5.0  # for a busy 2-core machine, on top of the documented lease + 5 s


async def _right_after_a_lead_renewal(redis: Redis, seconds: float) -> None:
    """Return just after the maintenance lead is renewed (the worst moment to kill its holder:
    a lead that must expire before anyone reclaims lives longest); give up after ``seconds``."""
    deadline = time.monotonic() + seconds
    last = await redis.pttl(MAINTENANCE_LEADER)
    while time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        now = await redis.pttl(MAINTENANCE_LEADER)
        if now > last:
            return
        last = now


@pytest.mark.timeout(300)
async def test_runs_of_a_killed_process_resume_within_the_lease_plus_five_seconds(
    tmp_path: Path, redis_url: str, redis: Redis
) -> None:
    env = {"REDIS_URL": redis_url, "GATEWAY_JOB_LEASE_SECONDS": str(LEASE)}
    with serving(tmp_path, **env) as (first, first_base):
        async with httpx.AsyncClient(base_url=first_base) as a:

            async def led() -> bool:
                return bool(await redis.exists(MAINTENANCE_LEADER))

            await _until(led, seconds=LEASE, logs=tmp_path)  # the first process leads
            meta = {"sleep": 600, "once": str(tmp_path / "ran-once")}
            r = await _send(
                a, "x", agent="partial", metadata=meta, configuration={"blocking": False}
            )
            tid = r.json()["task"]["id"]

            async def held_by_first() -> bool:
                task = (await a.get(f"/v1/tasks/{tid}")).json()
                if task["status"]["state"] != "working" or "artifacts" not in task:
                    return False
                rows = await redis.xpending_range(JOBS, JOBS_GROUP, "-", "+", 10)
                return any(f":{first.pid}:" in r["consumer"].decode() for r in rows)

            await _until(held_by_first, logs=tmp_path)
        # the second process starts after the first holds the run and the lead
        with serving(tmp_path, **env) as (_, second_base):
            async with httpx.AsyncClient(base_url=second_base) as c:
                await _right_after_a_lead_renewal(redis, LEASE)
                first.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                first.wait(timeout=10)

                async def completed() -> dict[str, Any] | None:
                    task: dict[str, Any] = (await c.get(f"/v1/tasks/{tid}")).json()
                    return task if task["status"]["state"] == "completed" else None

                task = await _until(completed, seconds=3 * LEASE, every=0.1, logs=tmp_path)
                took = time.monotonic() - killed
    print(f"resumed and finished {took:.1f} s after kill -9 (lease {LEASE:.0f} s)")
    assert took <= LEASE + 5 + SLACK, f"took {took:.1f} s"
    assert [a["name"] for a in task["artifacts"]] == ["partial", "final"]
    assert [m["parts"][0]["text"] for m in task["history"]] == ["x", "working on it", "done"]
    assert (await redis.xpending(JOBS, JOBS_GROUP))["pending"] == 0
