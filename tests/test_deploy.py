"""deploy/: the image's install layout, run; compose and k8s checked against the app.

Images cannot be built here (no registry for the base images), so ``image`` does what
deploy/Dockerfile says, line by line, in a directory standing in for the image's root: the
build context as .dockerignore lets it in, the build stage's COPY, ENV, WORKDIR and RUN
lines (RUN ``sh deploy/install.sh`` is run for real, with the Dockerfile's environment),
then a *new* root holding only what the final stage copies from the build stage, at the
paths it names, and the final stage's ENV. Any RUN step the test does not know fails it, so
the Dockerfile cannot grow a step the test skips. The host's Python stands in for the base
image's, the uv of the Makefile (asserted to be the Dockerfile's version) for pip's, and
USER is not reproduced.

From that root the tests run ``gateway --help``, the image's CMD and HEALTHCHECK, and the
compose services with their healthchecks, against the tests' Redis; the static tests check
that every probe names a route the app answers, every GATEWAY_* name in deploy/ is a setting,
and workers get no HTTP probe they cannot answer.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic_settings import BaseSettings
from starlette.routing import Match

from gateway.app import create_app
from gateway.embedded_redis import free_port
from gateway.settings import Settings
from tests import processes
from tests.conftest import TEST_KEYRING
from tests.waiting import until_sync

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))
# The PATH of the python base image, which `$PATH` in an ENV line extends.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
START_SECONDS = 60.0
# Installing from uv's cache takes ~10-15 s; the processes a few seconds each.
install_layout = pytest.mark.timeout(240)


# --- deploy/Dockerfile, read ---------------------------------------------------------------


@dataclass
class Instruction:
    stage: str
    name: str
    args: str


def _logical_lines(text: str) -> Iterator[str]:
    """Lines with continuations joined, comments and blank lines left out."""
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        yield current + line
        current = ""


def dockerfile() -> tuple[list[str], list[Instruction]]:
    """The base image of each stage (ARGs substituted) and every instruction by stage."""
    args: dict[str, str] = {}
    bases: list[str] = []
    out: list[Instruction] = []
    stage = ""
    for line in _logical_lines(DOCKERFILE.read_text()):
        name, _, rest = line.partition(" ")
        name, rest = name.upper(), rest.strip()
        if name == "ARG" and not bases:
            key, _, value = rest.partition("=")
            args[key] = value
        elif name == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], words[0])
            bases.append(base)
            stage = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(bases))
        else:
            out.append(Instruction(stage, name, rest))
    return bases, out


def _env_pairs(args: str) -> list[tuple[str, str]]:
    pairs = []
    for word in shlex.split(args):
        key, eq, value = word.partition("=")
        assert eq, f"ENV {args!r}: only the KEY=value form is read here"
        pairs.append((key, value))
    return pairs


def _exec_form(args: str) -> list[str]:
    assert args.startswith("["), f"{args!r}: use the exec (JSON) form"
    value = json.loads(args)
    assert isinstance(value, list)
    return [str(v) for v in value]


def healthcheck_command() -> list[str]:
    (check,) = [i.args for i in dockerfile()[1] if i.name == "HEALTHCHECK"]
    return _exec_form(check[check.index("CMD ") + 4 :])


def uv_version_in_dockerfile() -> str:
    runs = " ".join(i.args for i in dockerfile()[1] if i.name == "RUN")
    match = re.search(r"\bpip install [^&]*\buv==([\w.]+)", runs)
    assert match, "the build stage installs a pinned uv"
    return match[1]


# --- .dockerignore, applied ----------------------------------------------------------------


def _pattern(pattern: str) -> re.Pattern[str]:
    """Go's filepath.Match with ``**`` (as moby's patternmatcher), on context paths."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        else:
            c = pattern[i]
            out += "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c)
            i += 1
    return re.compile(out + r"\Z")


def _ignore_rules() -> list[tuple[bool, str, re.Pattern[str]]]:
    rules = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        cleaned = posixpath.normpath(line.lstrip("!").strip().lstrip("/"))
        rules.append((negated, cleaned, _pattern(cleaned)))
    return rules


def ignored(path: str, rules: list[tuple[bool, str, re.Pattern[str]]]) -> bool:
    """Whether docker leaves ``path`` out of the context: the last pattern matching it or
    one of its parent directories decides."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    result = False
    for negated, _, regex in rules:
        if any(regex.match(p) for p in prefixes):
            result = not negated
    return result


def build_context() -> set[str]:
    """The files of the repository docker sends as the build context."""
    rules = _ignore_rules()
    reincluded = [text for negated, text, _ in rules if negated]
    files: set[str] = set()
    for directory, dirs, names in os.walk(ROOT):
        rel = Path(directory).relative_to(ROOT).as_posix()
        rel = "" if rel == "." else rel + "/"
        dirs[:] = [
            d
            for d in dirs
            if not ignored(rel + d, rules) or any(r.startswith(rel + d + "/") for r in reincluded)
        ]
        files.update(rel + n for n in names if not ignored(rel + n, rules))
    return files


# --- the image, reproduced -----------------------------------------------------------------


@dataclass
class Image:
    root: Path
    env: dict[str, str]
    workdir: str
    cmd: list[str]
    healthcheck: list[str]
    build_seconds: float

    def at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def environment(self, **overrides: str) -> dict[str, str]:
        return {"HOME": str(self.root / "home"), "LANG": "C.UTF-8", **self.env, **overrides}

    def which(self, command: str, env: dict[str, str]) -> str:
        found = shutil.which(command, path=env["PATH"])
        assert found, f"{command!r} is not on the image's PATH {env['PATH']}"
        assert Path(found).is_relative_to(self.root), f"{command!r} resolves outside: {found}"
        return found


class Stage:
    """One stage of the Dockerfile, carried out under ``root``."""

    def __init__(self, root: Path, context: set[str], env: dict[str, str]) -> None:
        self.root, self.context, self.env = root, context, env
        self.workdir = "/"

    def at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def set_env(self, args: str) -> None:
        """ENV: paths are the image's, so under ``root``; ``$PATH`` is the PATH so far
        (host directories standing in for the base image's)."""
        for key, value in _env_pairs(args):
            if key == "PATH":
                value = ":".join(
                    self.env["PATH"] if part in ("$PATH", "${PATH}") else str(self.at(part))
                    for part in value.split(":")
                )
            elif value.startswith("/"):
                value = str(self.at(value))
            self.env[key] = value

    def copy(self, args: str, stages: dict[str, Path]) -> None:
        words = shlex.split(args)
        flags = [w for w in words if w.startswith("--")]
        *sources, dest = [w for w in words if not w.startswith("--")]
        dest = dest if dest.startswith("/") else posixpath.join(self.workdir, dest)
        origin = next((stages[f[7:]] for f in flags if f.startswith("--from=")), None)
        for source in sources:
            if origin is not None:
                # Moved rather than copied (the same result: the build stage is dropped).
                self.at(dest).parent.mkdir(parents=True, exist_ok=True)
                (origin / source.lstrip("/")).rename(self.at(dest))
                continue
            self._copy_from_context(source, dest, into=dest.endswith("/") or len(sources) > 1)

    def _copy_from_context(self, source: str, dest: str, into: bool) -> None:
        source = posixpath.normpath(source)
        if source in self.context:
            target = self.at(dest) / posixpath.basename(source) if into else self.at(dest)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / source, target)
            return
        inside = sorted(f for f in self.context if f.startswith(source + "/"))
        assert inside, f"COPY {source}: not in the build context (see .dockerignore)"
        for f in inside:
            target = self.at(dest) / f[len(source) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, target)

    def run(self, command: str) -> None:
        """A RUN line, step by step: each ``&&`` part must be one the test knows."""
        for step in (s.strip() for s in command.split("&&")):
            if step == "sh deploy/install.sh":
                done = subprocess.run(
                    ["sh", "deploy/install.sh"],
                    cwd=self.at(self.workdir),
                    env=self.env,
                    capture_output=True,
                    text=True,
                    timeout=180,
                )
                assert done.returncode == 0, done.stdout + done.stderr
            elif re.fullmatch(r"pip install [^&]*\buv==[\w.]+", step):
                pass  # the uv of the Makefile stands in (same version: checked below)
            elif step == "rm -rf /root/.cache" or step.startswith("useradd "):
                pass  # no effect on what the image runs
            else:
                pytest.fail(f"RUN {step!r}: the test does not know how to reproduce this step")


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        pytest.skip("no uv here (make install provides one)")
    return found


def _host_env(tools: Path) -> dict[str, str]:
    """What the build stage sees of this machine: uv's cache and index settings, proxies."""
    dropped = ("GATEWAY_", "REDIS_URL", "VIRTUAL_ENV", "PYTHON", "UV_PROJECT_ENVIRONMENT")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(PATH=f"{tools}:{BASE_PATH}", UV_PYTHON=sys.executable)
    return env


def _stage(
    instructions: list[Instruction], name: str, stage: Stage, stages: dict[str, Path]
) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for i in (i for i in instructions if i.stage == name):
        if i.name == "ENV":
            stage.set_env(i.args)
        elif i.name == "WORKDIR":
            stage.workdir = posixpath.join(stage.workdir, i.args)
            stage.at(stage.workdir).mkdir(parents=True, exist_ok=True)
        elif i.name == "COPY":
            stage.copy(i.args, stages)
        elif i.name == "RUN":
            stage.run(i.args)
        elif i.name in ("CMD", "HEALTHCHECK", "USER", "EXPOSE"):
            kept[i.name] = i.args
        else:
            pytest.fail(f"{i.name} {i.args}: the test does not reproduce this instruction")
    return kept


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Image:
    """deploy/Dockerfile carried out in a directory standing in for the image's root."""
    tmp = tmp_path_factory.mktemp("image")
    tools = tmp / "tools"
    tools.mkdir()
    (tools / "uv").symlink_to(_uv())
    bases, instructions = dockerfile()
    names = list(dict.fromkeys(i.stage for i in instructions))
    assert len(names) == len(bases) == 2, "a build stage and the final stage"
    context = build_context()
    root = tmp / "root"
    started = time.monotonic()
    build = Stage(root, context, _host_env(tools))
    _stage(instructions, names[0], build, {})
    build_seconds = time.monotonic() - started
    # The final stage is a new filesystem at the same paths: only what it copies is there.
    built = root.rename(tmp / "build-stage")
    final = Stage(root, context, {"PATH": BASE_PATH})
    kept = _stage(instructions, names[1], final, {names[0]: built})
    shutil.rmtree(built)
    health = kept["HEALTHCHECK"]
    return Image(
        root=root,
        env=final.env,
        workdir=final.workdir,
        cmd=_exec_form(kept["CMD"]),
        healthcheck=_exec_form(health[health.index("CMD ") + 4 :]),
        build_seconds=build_seconds,
    )


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


# --- compose and k8s, read -----------------------------------------------------------------


def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def k8s_containers() -> list[dict[str, Any]]:
    containers = []
    for path in K8S:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("Deployment", "StatefulSet", "DaemonSet"):
                containers += doc["spec"]["template"]["spec"]["containers"]
    return containers


def image_defaults() -> tuple[list[str], dict[str, str]]:
    """The image's CMD and the GATEWAY_* values of its final stage's ENV."""
    _, instructions = dockerfile()
    final = instructions[-1].stage
    env: dict[str, str] = {}
    for i in instructions:
        if i.stage == final and i.name == "ENV":
            env.update((k, v) for k, v in _env_pairs(i.args) if k.startswith("GATEWAY_"))
    (cmd,) = [_exec_form(i.args) for i in instructions if i.name == "CMD"]
    return cmd, env


def role(command: list[str] | None) -> str:
    words = command or image_defaults()[0]
    assert words[0] == "gateway" and words[1] in ("serve", "worker"), words
    return words[1]


def app_routes() -> Callable[[str], bool]:
    app = create_app(Settings(redis_url="redis://127.0.0.1:1/0", encryption="off"))

    def exists(path: str) -> bool:
        scope = {"type": "http", "path": path, "method": "GET", "root_path": ""}
        return any(route.matches(scope)[0] == Match.FULL for route in app.routes)

    return exists


def probed(command: list[str]) -> tuple[str | None, list[str]]:
    """The port variable and the paths a python one-liner healthcheck requests."""
    text = " ".join(command)
    port = re.search(r"'(GATEWAY_\w*PORT)'", text)
    return (port[1] if port else None), re.findall(r"'(/[\w./-]*)'", text)


def k8s_port_probes(container: dict[str, Any]) -> list[tuple[str, Any, str | None]]:
    """(kind, port, path) of each probe of a container that reaches a port (httpGet, or
    tcpSocket with no path); exec probes reach none."""
    found = []
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(kind, {})
        if "httpGet" in probe:
            found.append((kind, probe["httpGet"]["port"], probe["httpGet"].get("path", "/")))
        elif "tcpSocket" in probe:
            found.append((kind, probe["tcpSocket"]["port"], None))
    return found


def container_port(container: dict[str, Any], port: Any) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == port]
    return int(number)


def setting_names() -> set[str]:
    """Every environment variable the settings read, nested ones included."""

    def names(model: type[BaseSettings]) -> set[str]:
        prefix = str(model.model_config.get("env_prefix", ""))
        out = set()
        for name, info in model.model_fields.items():
            nested = info.annotation
            if isinstance(nested, type) and issubclass(nested, BaseSettings):
                out |= names(nested)
                continue
            alias = info.validation_alias
            choices = getattr(alias, "choices", None)
            out |= {str(c) for c in choices} if choices else {(prefix + name).upper()}
        return out

    return names(Settings)


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


# --- static checks -------------------------------------------------------------------------


def test_both_stages_share_one_base_image_pinned_by_digest() -> None:
    bases, _ = dockerfile()
    assert len(set(bases)) == 1, f"the environment's python comes from the build stage: {bases}"
    images = bases + [s["image"] for s in compose_services().values() if "image" in s]
    for name in images:
        match = re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:([0-9a-f]{64})", name)
        assert match, f"{name}: pin by tag and digest"
        assert len(set(match[1])) > 8, f"{name}: a placeholder digest"


def test_the_image_installs_with_the_uv_of_the_makefile() -> None:
    makefile = re.search(r"^UV_VERSION\s*:=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert makefile and uv_version_in_dockerfile() == makefile[1]
    done = subprocess.run([_uv(), "--version"], capture_output=True, text=True)
    assert done.stdout.split()[1] == makefile[1]


def test_the_build_context_holds_only_what_the_image_copies() -> None:
    rules = _ignore_rules()
    for path in (".venv/bin/python", ".data/redis/appendonly.aof", ".git/HEAD", "tests/x.py",
                 "gateway/__pycache__/cli.cpython-311.pyc", "notes.txt", "deploy/Dockerfile"):  # fmt: skip
        assert ignored(path, rules), f"{path} would be sent to the docker daemon"
    context = build_context()
    assert not [f for f in context if f.startswith((".venv/", ".data/", "tests/", ".git/"))]
    _, instructions = dockerfile()
    for i in instructions:
        if i.name == "COPY" and "--from=" not in i.args:
            for source in shlex.split(i.args)[:-1]:
                source = posixpath.normpath(source)
                assert source in context or any(f.startswith(source + "/") for f in context), source


def test_every_variable_named_in_deploy_is_a_setting() -> None:
    known = setting_names()
    assert {
        "REDIS_URL",
        "GATEWAY_PORT",
        "GATEWAY_CORTADEL_URL",
        "GATEWAY_CORTADEL_TENANT_KEYS",
    } <= known
    for path in sorted(p for p in DEPLOY.rglob("*") if p.is_file()):
        for name in set(
            re.findall(r"\b(?:GATEWAY_[A-Z0-9_]*[A-Z0-9]|REDIS_URL)\b", path.read_text())
        ):
            assert name in known, f"{path.relative_to(ROOT)}: {name} is not a setting"


def _compose_serve_ok(name: str, service: dict[str, Any], env: dict[str, str]) -> None:
    published = {str(p).rsplit(":", 1)[-1] for p in service.get("ports", [])}
    served = {
        env["GATEWAY_PORT"],
        *([env["GATEWAY_GRPC_PORT"]] if "GATEWAY_GRPC_PORT" in env else []),
    }
    assert published == served, f"{name} publishes {published}"
    # Its own healthcheck, or the image's: HTTP on GATEWAY_PORT, to a route that exists.
    port, paths = probed(service.get("healthcheck", {}).get("test") or healthcheck_command())
    exists = app_routes()
    assert port == "GATEWAY_PORT" and paths and all(exists(p) for p in paths), (name, paths)


def _compose_worker_ok(name: str, service: dict[str, Any], env: dict[str, str]) -> None:
    # The image's healthcheck (HTTP on GATEWAY_PORT) must be replaced or disabled.
    check = service.get("healthcheck", {})
    assert check.get("disable") or check.get("test"), f"{name}: worker keeps the HTTP check"
    if check.get("test"):
        port, paths = probed(check["test"])
        assert port == "GATEWAY_METRICS_PORT" and env.get(port), f"{name}: {check['test']}"
        assert paths == ["/metrics"], paths


def test_compose_builds_from_the_root_and_probes_what_each_service_serves() -> None:
    _, defaults = image_defaults()
    built = {n: s for n, s in compose_services().items() if "build" in s}
    assert {role(s.get("command")) for s in built.values()} == {"serve", "worker"}
    for name, service in built.items():
        assert (COMPOSE.parent / service["build"]["context"]).resolve() == ROOT, name
        assert service["build"]["dockerfile"] == "deploy/Dockerfile", name
        env = {**defaults, **service.get("environment", {})}
        if role(service.get("command")) == "serve":
            _compose_serve_ok(name, service, env)
        else:
            _compose_worker_ok(name, service, env)


def test_k8s_probes_name_routes_of_the_app_and_workers_have_no_http_one() -> None:
    exists = app_routes()
    _, defaults = image_defaults()
    containers = k8s_containers()
    assert {role(c.get("command")) for c in containers} == {"serve", "worker"}
    for c in containers:
        env = {**defaults, **{e["name"]: e["value"] for e in c.get("env", []) if "value" in e}}
        probes = k8s_port_probes(c)
        if role(c.get("command")) == "serve":
            assert {kind for kind, _, _ in probes} >= {"readinessProbe", "livenessProbe"}
            for kind, port, path in probes:
                assert path is None or exists(path), f"{c['name']} {kind}: no route {path}"
                assert container_port(c, port) == int(env["GATEWAY_PORT"]), f"{c['name']} {kind}"
            continue
        # A worker serves no HTTP API: a probe that reaches a port must reach its metrics.
        metrics = env.get("GATEWAY_METRICS_PORT")
        for kind, port, path in probes:
            assert metrics and container_port(c, port) == int(metrics), f"{c['name']} {kind}"
            assert path in (None, "/metrics"), f"{c['name']} {kind}: {path}"
