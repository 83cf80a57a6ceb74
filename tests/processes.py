"""Real `gateway serve` / `gateway worker` processes on 127.0.0.1, bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from gateway.embedded_redis import free_port

ROOT = Path(__file__).resolve().parent.parent


def environment(tmp: Path, **env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "REDIS_URL"))}
    base.update(
        {
            "GATEWAY_DATA_DIR": str(tmp / ".data"),
            "GATEWAY_LOG_LEVEL": "INFO",
            "GATEWAY_AGENT_PLUGINS": "tests.agents:Partial,tests.agents:StoreFlaky",
            "PYTHONPATH": str(ROOT),
        }
    )
    base.update(env)
    return base


def _wait(check: object, log: Path, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(log.read_text()[-3000:])


@contextmanager
def serving(tmp: Path, *args: str, **env: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`gateway serve` on a free port; yields the process and its base URL."""
    port = free_port()
    log_path = tmp / f"serve-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), *args],
            env=environment(tmp, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        try:
            _wait(ready, log_path)
            yield proc, base
        finally:
            stop(proc)


@contextmanager
def working(tmp: Path, name: str, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """`gateway worker`; yields once it has started."""
    log_path = tmp / f"worker-{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "worker"],
            env=environment(tmp, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait(lambda: b"worker started" in log_path.read_bytes(), log_path)
            yield proc
        finally:
            stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a graceful stop), then SIGKILL if it takes too long."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait(timeout=10)
