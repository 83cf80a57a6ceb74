"""The `make bench` report writer, on synthetic figures (nothing here is timed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import loadgen
from bench.report import Report, Run, Target, read_json, write


def synthetic() -> Report:
    report = Report(
        settings={"rounds": 1, "seconds": 1.0, "only": "", "strict": False, "cpus": 2},
        started="2026-01-01T00:00:00+00:00",
        duration_seconds=61.5,
        sections={"core": 40.0, "queues": 21.5},
    )
    report.target("c=32 send throughput, gateway/floor", 0.44, 0.50, ">=")
    report.target("c=1 send p50, gateway - floor", 0.74, 1.5, "<=", "ms")
    report.target("gateway peak RSS, c=1 and c=32", 123.0, 250, "<", "MB")
    report.target("indexing, hashing embedder", 10_883.0, 500, ">=", "msg/s")
    for group, scale in (("message:send, c=1", 1), ("message:send, c=32", 10)):
        report.runs += [
            Run(group, "ceiling (Starlette, no Redis)", "ceiling", 3000.0 * scale, 0.3, 0.9),
            Run(group, "floor (Starlette + 1 pipeline)", "floor", 1700.0 * scale, 0.58, 1.4),
            Run(group, "gateway (embedding off)", "gateway", 750.0 * scale, 1.32, 4.1, errors=1),
        ]
    result = loadgen.Result(latencies=[0.001, 0.002, 0.003, 0.004], seconds=0.01)
    report.run("context size, c=1", "append, 10 messages", "gateway", result)
    report.figure("Redis bytes per message (MEMORY USAGE)", 1405.0)
    return report


def test_targets_pass_or_miss() -> None:
    report = synthetic()
    assert [t.passed for t in report.targets] == [False, True, True, True]
    assert [t.name for t in report.misses] == ["c=32 send throughput, gateway/floor"]
    assert not Target("unmeasured", float("nan"), 1.0, "<=").passed
    with pytest.raises(ValueError):
        Target("bad", 1.0, 1.0, "==")
    table = report.table()
    assert "MISS" in table and table.count("pass") == 3
    assert "0.74 ms" in table and "< 250 MB" in table


def test_writes_json_and_png(tmp_path: Path) -> None:
    report = synthetic()
    json_path, png_path = write(report, tmp_path / "bench")

    png = png_path.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 10_000

    data = json.loads(json_path.read_text())
    assert data["passed"] is False
    assert [t["passed"] for t in data["targets"]] == [False, True, True, True]
    assert len(data["runs"]) == 7
    assert read_json(json_path) == report


def test_unmeasured_figures_are_null_in_json(tmp_path: Path) -> None:
    report = Report(settings={}, started="2026-01-01T00:00:00+00:00")
    report.target("search p50, 10,000 messages", float("nan"), 20, "<", "ms")
    report.run("message:send, c=1", "gateway", "gateway", loadgen.Result())
    json_path, png_path = write(report, tmp_path)

    data = json.loads(json_path.read_text())  # standard JSON: no NaN literal
    assert data["targets"][0]["measured"] is None
    assert data["targets"][0]["passed"] is False
    assert data["runs"][0]["p50_ms"] is None
    assert math.isnan(read_json(json_path).targets[0].measured)
    assert png_path.read_bytes().startswith(b"\x89PNG")


def test_a_paired_side_serves_the_tree_it_is_started_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ``python -m`` puts the working directory before PYTHONPATH: a side given its checkout
    # through PYTHONPATH imported the tree the tool ran from, and compared a build with
    # itself. Each side is started in its own tree, and the tool checks what it imports.
    from bench.paired import imported_from

    other = tmp_path / "other"
    (other / "gateway").mkdir(parents=True)
    (other / "gateway" / "__init__.py").write_text("")
    this = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", str(this))
    assert imported_from(other) == other
    assert imported_from(this) == this


def test_a_merged_run_keeps_each_rounds_throughput(tmp_path: Path) -> None:
    from bench.harness import by_round, merge

    def run(requests: int, seconds: float) -> loadgen.Result:
        return loadgen.Result(latencies=[0.001] * requests, seconds=seconds)

    a = merge([run(100, 1.0), run(300, 1.0)])
    b = merge([run(100, 1.0), run(200, 1.0)])
    assert a.throughput == 200 and b.throughput == 150
    assert by_round(a, b) == "rounds 1.00–1.50"
    assert by_round(run(1, 1.0), run(1, 1.0)) == "one round"

    report = Report(settings={}, started="2026-01-01T00:00:00+00:00")
    report.run("message:send, c=32", "gateway", "gateway", a)
    assert report.runs[0].rounds == (100.0, 300.0)
    json_path, _ = write(report, tmp_path)
    assert json.loads(json_path.read_text())["runs"][0]["rounds"] == [100.0, 300.0]
    assert read_json(json_path).runs[0].rounds == (100.0, 300.0)


def test_each_round_runs_the_configurations_in_another_order() -> None:
    from bench.harness import in_turn

    names = ["canonical", "json-rpc", "rest 1.0"]
    orders = [in_turn(names, n) for n in range(3)]
    assert all(sorted(order) == sorted(names) for order in orders)
    assert [order[0] for order in orders] == names  # each runs first once
    assert in_turn(names, 3) == names and in_turn([], 1) == []
