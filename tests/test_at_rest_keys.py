"""PHI at rest, by configuration: encryption off stores clear values and still reads sealed
ones, an external Redis needs keys, and the embedded gateway seals with a key it generates."""

from __future__ import annotations

import stat
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from gateway.store.sealing import Keyring
from tests.at_rest_sentinel import every_value, files_holding, holding, sealed_with, send_sentinel
from tests.conftest import AppFactory, RawRedis
from tests.processes import environment, serving, slow_process_test
from tests.waiting import until


async def test_encryption_off_stores_clear_and_still_reads_sealed_values(
    make_app: AppFactory, redis: RawRedis
) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    async with make_app() as c:
        sealed = await send_sentinel(c, sentinel)
    async with make_app(encryption="off") as c:
        clear = await send_sentinel(c, sentinel)
        assert sentinel in (await c.get(f"/v1/tasks/{sealed['id']}")).text
    assert await sealed_with(redis, clear) == {None}
    values = await every_value(redis)
    assert holding(values, sentinel)  # clear, as configured


def test_encryption_needs_keys_with_an_external_redis(tmp_path: Path, redis_url: str) -> None:
    env = environment(tmp_path, REDIS_URL=redis_url, GATEWAY_ENCRYPTION="on")
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "GATEWAY_ENCRYPTION_KEYS is required" in done.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve"],
        env={**env, "GATEWAY_ENCRYPTION_KEYS": '{"k1": "c2hvcnQ="}'},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2
    assert "GATEWAY_ENCRYPTION_KEYS" in bad.stderr and "32 bytes" in bad.stderr
    assert "c2hvcnQ" not in bad.stderr


@slow_process_test
async def test_the_embedded_gateway_seals_with_a_generated_key(tmp_path: Path) -> None:
    sentinel = f"SENTINEL-{uuid.uuid4().hex}"
    data = tmp_path / ".data"
    with serving(tmp_path) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            task = await send_sentinel(c, sentinel)
            assert sentinel in (await c.get(f"/v1/tasks/{task['id']}")).text
            # the context id (clear) reaches the append-only file; the sentinel does not
            await until(
                lambda: files_holding(data / "redis", task["contextId"]),
                what="the context's writes on disk",
                logs=tmp_path,
            )
            assert files_holding(data, sentinel) == []
    keyring = data / "encryption-keys.json"
    assert stat.S_IMODE(keyring.stat().st_mode) == 0o600
    Keyring.parse(str(keyring))  # a valid keyring, outside the Redis directory
    assert [p.name for p in data.rglob("encryption-keys.json")] == ["encryption-keys.json"]
