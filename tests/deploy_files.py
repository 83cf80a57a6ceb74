"""deploy/ as the tests read and reproduce it: deploy/Dockerfile's instructions, the build
context that .dockerignore lets in, the names compose, k8s and the app use, and ``image``.

Images cannot be built here (no registry for the base images), so ``image`` does what
deploy/Dockerfile says, line by line, in a directory standing in for the image's root: the
build context as .dockerignore lets it in, the build stage's COPY, ENV, WORKDIR and RUN
lines (RUN ``sh deploy/install.sh`` is run for real, with the Dockerfile's environment),
then a *new* root holding only what the final stage copies from the build stage, at the
paths it names, and the final stage's ENV. Any RUN step the test does not know fails it, so
the Dockerfile cannot grow a step the test skips. The host's Python stands in for the base
image's, the uv of the Makefile (asserted to be the Dockerfile's version) for pip's, and
USER is not reproduced."""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
K8S = sorted((DEPLOY / "k8s").glob("*.yaml"))
# The PATH of the python base image, which `$PATH` in an ENV line extends.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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
