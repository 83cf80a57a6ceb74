"""Real `gateway serve` / `gateway worker` processes on 127.0.0.1, bounded in time."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from gateway.embedded_redis import free_port
from tests.waiting import log_tail, until_sync

ROOT = Path(__file__).resolve().parent.parent
# How long a process may take to start, or to stop when asked: generous, since it only
# matters when one fails (start-up imports take seconds; on a busy machine many more).
PROCESS_SECONDS = float(os.environ.get("GATEWAY_TEST_PROCESS_SECONDS", "60"))
# For a test that starts processes: room for a few slow start-ups before pytest-timeout
# cuts in (the suite's 60 s default suits in-process tests).
slow_process_test = pytest.mark.timeout(int(4 * PROCESS_SECONDS))


def environment(tmp: Path, **env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "REDIS_URL"))}
    base.update(
        {
            "GATEWAY_DATA_DIR": str(tmp / ".data"),
            "GATEWAY_LOG_LEVEL": "INFO",
            "GATEWAY_AGENT_PLUGINS": "tests.agents:Partial,tests.agents:StoreFlaky",
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",  # every line reaches the log file at once
        }
    )
    if "REDIS_URL" in env and "GATEWAY_ENCRYPTION" not in env:
        from tests.conftest import TEST_KEYRING

        base["GATEWAY_ENCRYPTION_KEYS"] = TEST_KEYRING
    base.update(env)
    return base


def gateway_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m gateway.cli ARGS`` to its end, in an environment without the caller's
    gateway settings (``env`` on top); its output captured as text."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "REDIS_URL"))}
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=2 * PROCESS_SECONDS,
    )


def _started(
    proc: subprocess.Popen[bytes], ready: Callable[[], bool], what: str, log: Path
) -> None:
    """Wait until ``ready``; fail at once if the process exits, and name it either way."""

    def check() -> bool:
        if proc.poll() is not None:
            raise AssertionError(
                f"{what} exited with code {proc.returncode} before it was ready{log_tail(log)}"
            )
        return ready()

    until_sync(check, timeout=PROCESS_SECONDS, what=f"{what} to be ready", logs=log)


def answers_ready(base: str) -> bool:
    """Whether the gateway at ``base`` answers ``/readyz`` with 200."""
    try:
        return httpx.get(f"{base}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


def launch(tmp: Path, *args: str, **env: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    """`gateway serve` started on a free port, not waited for: the process, its base URL and
    its log file."""
    port = free_port()
    log_path = tmp / f"serve-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve", "--port", str(port), *args],
            env=environment(tmp, **env),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return proc, f"http://127.0.0.1:{port}", log_path


@contextmanager
def serving(tmp: Path, *args: str, **env: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`gateway serve` on a free port; yields the process and its base URL."""
    proc, base, log_path = launch(tmp, *args, **env)
    try:
        _started(proc, lambda: answers_ready(base), f"`gateway serve` at {base}", log_path)
        yield proc, base
    except BaseException:
        # the test failed while the process served: what it logged is the evidence
        sys.stderr.write(f"`gateway serve` at {base} logged:{log_tail(log_path)}\n")
        raise
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
            _started(
                proc,
                lambda: b"worker started" in log_path.read_bytes(),
                f"`gateway worker` {name}",
                log_path,
            )
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
