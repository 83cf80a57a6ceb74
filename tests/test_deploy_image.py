"""deploy/: the image's install layout, run. From the root ``image`` (tests/deploy_files.py)
reproduces, the tests run ``gateway --help``, the image's CMD and HEALTHCHECK, and the
compose services with their healthchecks, against the tests' Redis."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.embedded_redis import free_port
from tests import processes
from tests.conftest import TEST_KEYRING
from tests.deploy_files import Image, compose_services, k8s_containers, k8s_port_probes, role
from tests.deploy_files import image as image
from tests.waiting import until_sync

START_SECONDS = 60.0
# Installing from uv's cache takes ~10-15 s; the processes a few seconds each.
install_layout = pytest.mark.timeout(240)


# --- processes in the image ----------------------------------------------------------------


def _answers(url: str, headers: dict[str, str] | None = None) -> bool:
    try:
        return httpx.get(url, headers=headers, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def running(
    image: Image, argv: list[str], env: dict[str, str], log: Path, ready: Callable[[], bool]
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` as the container runs it (from the image's PATH, in its WORKDIR)."""
    executable = image.which(argv[0], env)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [executable, *argv[1:]],
            env=env,
            cwd=image.at(image.workdir),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:

            def up() -> bool:
                assert proc.poll() is None, f"{argv} exited ({proc.returncode}):\n{log.read_text()}"
                return ready()

            until_sync(up, timeout=START_SECONDS, what=f"{argv} to be ready", every=0.1, logs=log)
            yield proc
        finally:
            processes.stop(proc)


def check_passes(image: Image, command: list[str], env: dict[str, str]) -> None:
    """A healthcheck (docker's exec form, or compose's ``["CMD", ...]``) exits 0."""
    assert command[0] != "CMD-SHELL", "use the exec form: the image's PATH finds python"
    if command[0] == "CMD":
        command = command[1:]
    done = subprocess.run(
        [image.which(command[0], env), *command[1:]],
        env=env,
        cwd=image.at(image.workdir),
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert done.returncode == 0, f"healthcheck {command} failed:\n{done.stderr}"


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


def send(base: str, key: str) -> dict[str, Any]:
    text = {"kind": "text", "text": "hi"}
    body = {"message": {"role": "user", "messageId": str(uuid.uuid4()), "parts": [text]}}
    r = httpx.post(
        f"{base}/v1/message:send",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()["task"]
    return task


# --- the install layout, run ---------------------------------------------------------------


@install_layout
def test_the_image_runs_gateway_from_where_it_was_installed(image: Image) -> None:
    env = image.environment()
    gateway = Path(image.which("gateway", env))
    interpreter = gateway.read_text().splitlines()[0].removeprefix("#!")
    assert Path(interpreter).is_relative_to(image.root), interpreter
    assert Path(interpreter).exists(), f"{gateway} starts {interpreter}, which is not there"
    done = subprocess.run(
        [str(gateway), "--help"], env=env, cwd=image.root, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "serve" in done.stdout and "worker" in done.stdout
    # The package comes from the image's environment, not from a source checkout.
    where = subprocess.run(
        [image.which("python", env), "-c", "import gateway; print(gateway.__file__)"],
        env=env,
        cwd=image.root,
        capture_output=True,
        text=True,
    )
    assert Path(where.stdout.strip()).is_relative_to(image.root), where.stdout + where.stderr
    print(f"build stage (uv sync from the cache): {image.build_seconds:.1f} s")


@install_layout
def test_the_image_command_serves_and_its_healthcheck_passes(
    image: Image, redis_url: str, tmp_path: Path
) -> None:
    """The image's CMD (what the k8s gateway Deployment runs), with API keys as required."""
    port = str(free_port())
    env = image.environment(
        REDIS_URL=redis_url,
        GATEWAY_HOST="127.0.0.1",
        GATEWAY_PORT=port,
        GATEWAY_API_KEYS='{"k": {"tenant": "t", "user": "u"}}',
        GATEWAY_ENCRYPTION_KEYS=TEST_KEYRING,
    )
    base = f"http://127.0.0.1:{port}"
    with running(
        image, image.cmd, env, tmp_path / "serve.log", lambda: _answers(f"{base}/readyz")
    ) as proc:
        check_passes(image, image.healthcheck, env)
        k8s_paths = {
            path
            for c in k8s_containers()
            if role(c.get("command")) == "serve"
            for _, _, path in k8s_port_probes(c)
            if path is not None
        }
        for path in {"/healthz", "/openapi.yaml", *k8s_paths}:
            assert _answers(base + path), f"{path} does not answer without credentials"
        assert send(base, "k")["status"]["state"] == "completed"
        assert stop(proc) == 0


@install_layout
def test_the_image_serves_without_redis_url_from_its_data_directory(
    image: Image, tmp_path: Path
) -> None:
    """No REDIS_URL: the embedded redis-server keeps its files in the image's data
    directory, under its working directory (what a volume at /var/lib/gateway keeps)."""
    port = str(free_port())
    env = image.environment(
        GATEWAY_HOST="127.0.0.1",
        GATEWAY_PORT=port,
        GATEWAY_API_KEYS='{"k": {"tenant": "t", "user": "u"}}',
    )
    data = Path(env["GATEWAY_DATA_DIR"])
    assert data.is_relative_to(image.at(image.workdir)), (data, image.workdir)
    base = f"http://127.0.0.1:{port}"
    with running(
        image, image.cmd, env, tmp_path / "serve.log", lambda: _answers(f"{base}/readyz")
    ) as proc:
        check_passes(image, image.healthcheck, env)
        assert send(base, "k")["status"]["state"] == "completed"
        assert stop(proc) == 0
    assert (data / "redis").is_dir(), sorted(p.name for p in data.iterdir())


@install_layout
def test_the_compose_services_run_from_the_image(
    image: Image, redis_url: str, tmp_path: Path
) -> None:
    """The compose gateway (HTTP only) and worker (runs), each with its healthcheck."""
    services = compose_services()
    port, metrics = str(free_port()), str(free_port())
    # what compose takes from the operator's environment
    local = {
        "REDIS_URL": redis_url,
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_ENCRYPTION_KEYS": TEST_KEYRING,
    }
    web_env = image.environment(**{**services["gateway"]["environment"], **local})
    web_env["GATEWAY_PORT"] = port
    worker_env = image.environment(**{**services["worker"]["environment"], **local})
    worker_env["GATEWAY_METRICS_PORT"] = metrics
    base = f"http://127.0.0.1:{port}"
    web_command, worker_command = services["gateway"]["command"], services["worker"]["command"]
    with (
        running(
            image, web_command, web_env, tmp_path / "web.log", lambda: _answers(f"{base}/readyz")
        ) as web,
        running(
            image,
            worker_command,
            worker_env,
            tmp_path / "worker.log",
            lambda: _answers(f"http://127.0.0.1:{metrics}/metrics"),
        ) as worker,
    ):
        check_passes(image, image.healthcheck, web_env)
        check_passes(image, services["worker"]["healthcheck"]["test"], worker_env)
        key = next(iter(json.loads(web_env["GATEWAY_API_KEYS"])))
        assert send(base, key)["status"]["state"] == "completed"  # run by the worker
        assert stop(web) == 0
        assert stop(worker) == 0
