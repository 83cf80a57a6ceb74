"""The Makefile's entry points, as `make -n` spells them out from a fresh clone: `make run`
installs the runtime dependencies only; `make test` adds the dev tools."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _planned(target: str, tmp: Path) -> list[str]:
    """The commands `make <target>` would run in a clone with no venv yet."""
    for name in ("Makefile", "pyproject.toml", "uv.lock"):
        shutil.copy(ROOT / name, tmp / name)
    # as from a shell: `make test` runs this suite, and a parent make's variables would
    # change what a child prints (directories) and does
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _syncs(lines: list[str]) -> list[str]:
    return [line for line in lines if " sync " in f"{line} "]


def test_make_run_installs_the_runtime_dependencies_only(tmp_path: Path) -> None:
    lines = _planned("run", tmp_path)
    syncs = _syncs(lines)
    assert syncs and all("--no-dev" in s for s in syncs), lines
    assert lines[-1].endswith("gateway serve"), lines


def test_make_test_installs_the_dev_tools(tmp_path: Path) -> None:
    syncs = _syncs(_planned("test", tmp_path))
    assert any("--no-dev" not in s for s in syncs), syncs


def test_make_test_runs_the_linters(tmp_path: Path) -> None:
    lines = _planned("test", tmp_path)
    pytest_at = next(i for i, line in enumerate(lines) if "pytest" in line)
    linters = [line for line in lines[:pytest_at] if "ruff" in line or "mypy" in line]
    assert any("ruff check" in line for line in linters), lines
    assert any("ruff format --check" in line for line in linters), lines
    assert any("mypy" in line for line in linters), lines


def test_make_test_names_only_tests_that_exist(tmp_path: Path) -> None:
    """The cluster stage lists its test files: a file renamed or removed must leave the list
    too, or the stage fails before it runs anything."""
    lines = _planned("test", tmp_path)
    at = next(i for i, line in enumerate(lines) if "GATEWAY_TEST_CLUSTER=1" in line)
    cluster = " ".join(lines[at:])  # the command, its continued lines joined
    named = {word.split("::")[0] for word in cluster.split() if word.startswith("tests/")}
    assert named, cluster
    missing = sorted(name for name in named if not (ROOT / name).is_file())
    assert missing == [], missing
