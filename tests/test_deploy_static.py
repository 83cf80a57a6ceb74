"""deploy/, read: the base image pinned by digest, the uv of the Makefile, the build
context, and compose and k8s checked against the app: every probe names a route the app
answers, every GATEWAY_* name in deploy/ is a setting, and workers get no HTTP probe they
cannot answer."""

from __future__ import annotations

import posixpath
import re
import shlex
import subprocess
from collections.abc import Callable
from typing import Any

from pydantic_settings import BaseSettings
from starlette.routing import Match

from gateway.app import create_app
from gateway.settings import Settings
from tests.deploy_files import (
    COMPOSE,
    DEPLOY,
    ROOT,
    _exec_form,
    _ignore_rules,
    _uv,
    build_context,
    compose_services,
    dockerfile,
    ignored,
    image_defaults,
    k8s_containers,
    k8s_port_probes,
    role,
)


def healthcheck_command() -> list[str]:
    (check,) = [i.args for i in dockerfile()[1] if i.name == "HEALTHCHECK"]
    return _exec_form(check[check.index("CMD ") + 4 :])


def uv_version_in_dockerfile() -> str:
    runs = " ".join(i.args for i in dockerfile()[1] if i.name == "RUN")
    match = re.search(r"\bpip install [^&]*\buv==([\w.]+)", runs)
    assert match, "the build stage installs a pinned uv"
    return match[1]


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
