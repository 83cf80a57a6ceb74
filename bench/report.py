"""The report of `make bench`: every target with its measured value, and the runs it drew on.

Each section records into ``REPORT`` as it measures: targets (a figure, its limit, pass or
miss), runs (one configuration under load: throughput, p50, p99) and informational figures.
At the end ``main`` prints the target table and writes ``report.json`` and ``report.png``.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import loadgen

COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
}
ROLE_COLORS = {
    "ceiling": "#4c9be8",
    "floor": "#8c8c8c",
    "reference": "#9b6bd1",
    "gateway": "#e8833a",
}


@dataclass(frozen=True)
class Target:
    """A figure the project states a target for: ``measured comparison limit`` passes."""

    name: str
    measured: float
    limit: float
    comparison: str
    unit: str = ""

    def __post_init__(self) -> None:
        if self.comparison not in COMPARISONS:
            raise ValueError(f"comparison must be one of {sorted(COMPARISONS)}")

    @property
    def passed(self) -> bool:
        """A measurement that could not be taken (NaN) is a miss."""
        return not math.isnan(self.measured) and COMPARISONS[self.comparison](
            self.measured, self.limit
        )


@dataclass(frozen=True)
class Run:
    """One configuration under load, as the chart draws it (one row per ``group``)."""

    group: str
    name: str
    role: str  # "ceiling", "floor", "reference" (the a2a-sdk server) or "gateway"
    throughput: float  # requests/s
    p50_ms: float
    p99_ms: float
    errors: int = 0
    rounds: tuple[float, ...] = ()  # throughput of each round a merged run was made of

    @classmethod
    def of(cls, group: str, name: str, role: str, result: loadgen.Result) -> Run:
        return cls(
            group,
            name,
            role,
            result.throughput,
            result.pct(0.5),
            result.pct(0.99),
            result.errors,
            tuple(part.throughput for part in result.parts),
        )


@dataclass
class Report:
    settings: dict[str, Any] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    sections: dict[str, float] = field(default_factory=dict)  # seconds each section took
    started: str = ""
    duration_seconds: float = 0.0

    def target(
        self, name: str, measured: float, limit: float, comparison: str, unit: str = ""
    ) -> None:
        self.targets.append(Target(name, measured, limit, comparison, unit))

    def run(self, group: str, name: str, role: str, result: loadgen.Result) -> None:
        self.runs.append(Run.of(group, name, role, result))

    def figure(self, name: str, value: float) -> None:
        self.figures[name] = value

    @property
    def misses(self) -> list[Target]:
        return [t for t in self.targets if not t.passed]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = _finite(asdict(self))
        for row, target in zip(out["targets"], self.targets, strict=True):
            row["passed"] = target.passed
        out["passed"] = not self.misses
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        def number(value: float | None) -> float:
            return float("nan") if value is None else float(value)

        return cls(
            settings=data["settings"],
            targets=[
                Target(t["name"], number(t["measured"]), t["limit"], t["comparison"], t["unit"])
                for t in data["targets"]
            ],
            runs=[
                Run(
                    r["group"],
                    r["name"],
                    r["role"],
                    number(r["throughput"]),
                    number(r["p50_ms"]),
                    number(r["p99_ms"]),
                    r["errors"],
                    tuple(number(t) for t in r.get("rounds", ())),
                )
                for r in data["runs"]
            ],
            figures={k: number(v) for k, v in data["figures"].items()},
            sections=data["sections"],
            started=data["started"],
            duration_seconds=data["duration_seconds"],
        )

    def table(self) -> str:
        """The targets, one line each: measured value, limit, pass or miss."""
        width = max((len(t.name) for t in self.targets), default=10)
        lines = [f"  {'target':<{width}}  {'measured':>12}  {'limit':>14}  result"]
        for t in self.targets:
            unit = t.unit if t.unit in ("", "×") else f" {t.unit}"
            measured = f"{_number(t.measured)}{unit}"
            limit = f"{t.comparison} {_number(t.limit)}{unit}"
            verdict = "pass" if t.passed else "MISS"
            lines.append(f"  {t.name:<{width}}  {measured:>12}  {limit:>14}  {verdict}")
        return "\n".join(lines)


def _number(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def _finite(value: Any) -> Any:
    """NaN and infinities become null: the JSON stays standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_json(report: Report, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n")


def read_json(path: Path) -> Report:
    return Report.from_dict(json.loads(path.read_text()))


def write_chart(report: Report, path: Path) -> None:
    """Throughput and p50/p99 of every run, one row of panels per group (a concurrency),
    the ceiling and floor of the same run drawn beside the gateway's configurations."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    groups = list(dict.fromkeys(run.group for run in report.runs))
    sizes = [sum(run.group == g for run in report.runs) for g in groups]
    fig = Figure(figsize=(14, 1.6 + 0.42 * sum(sizes) + 0.9 * len(groups)), layout="constrained")
    FigureCanvasAgg(fig)
    s = report.settings
    fig.suptitle(
        f"make bench, {report.started}: BENCH_ROUNDS={s.get('rounds')}, "
        f"BENCH_SECONDS={s.get('seconds')}"
        + (f", BENCH_ONLY={s['only']}" if s.get("only") else "")
        + f"; {s.get('cpus')} CPUs"
        + (
            f", load average {load:.1f} at start"
            if (load := s.get("load_average_at_start"))
            else ""
        )
        + f", {report.duration_seconds / 60:.1f} min"
    )
    if not groups:
        fig.text(0.5, 0.5, "no load runs in this report", ha="center")
    else:
        axes = fig.subplots(
            len(groups), 2, squeeze=False, gridspec_kw={"height_ratios": sizes}
        ).tolist()
        for (left, right), group in zip(axes, groups, strict=True):
            _draw_group(left, right, group, [run for run in report.runs if run.group == group])
    handles = [Patch(color=c, label=role) for role, c in ROLE_COLORS.items()]
    handles += [
        Patch(facecolor="white", edgecolor="black", label="p50"),
        Patch(facecolor="white", edgecolor="black", hatch="///", label="p99"),
    ]
    fig.legend(
        handles=handles,
        loc="outside lower center",
        ncols=len(handles),
        title="ceiling: Starlette answering a constant JSON, no Redis · floor: Starlette + one "
        "Redis pipeline of the same writes · each section interleaves its own configurations; "
        "the queue variants run with the default embedder (wordllama) on",
        title_fontsize=8,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _draw_group(left: Any, right: Any, group: str, runs: list[Run]) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ys = list(range(len(runs)))
    colors = [ROLE_COLORS.get(run.role, "#e8833a") for run in runs]
    bars = left.barh(ys, [run.throughput for run in runs], color=colors)
    labels = ["n/a" if math.isnan(r.throughput) else f"{r.throughput:,.0f}" for r in runs]
    left.bar_label(bars, labels=labels, padding=3, fontsize=8)
    for run in runs:
        if run.role in ("ceiling", "floor"):
            left.axvline(run.throughput, color=ROLE_COLORS[run.role], linestyle="--", lw=1)
    left.set_yticks(ys, [run.name for run in runs])
    left.invert_yaxis()
    left.margins(x=0.15)
    left.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    left.set_xlabel("throughput (requests/s)")
    left.set_title(f"{group}: throughput", loc="left", fontsize=10)

    height = 0.4
    p50 = right.barh([y - height / 2 for y in ys], [r.p50_ms for r in runs], height, color=colors)
    p99 = right.barh(
        [y + height / 2 for y in ys],
        [r.p99_ms for r in runs],
        height,
        color=colors,
        alpha=0.55,
        hatch="///",
    )
    right.bar_label(p50, labels=[_number(r.p50_ms) for r in runs], padding=3, fontsize=7)
    right.bar_label(p99, labels=[_number(r.p99_ms) for r in runs], padding=3, fontsize=7)
    # A log scale when the latencies span more than 20x (a 0.3 ms ceiling beside a 60 ms
    # recall); NaN compares False, so a run that measured nothing is left out.
    measured = [v for r in runs for v in (r.p50_ms, r.p99_ms) if v > 0]
    if measured and max(measured) > 20 * min(measured):
        right.set_xscale("log")
        right.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        right.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        right.xaxis.set_minor_formatter(NullFormatter())
    right.set_yticks(ys, [""] * len(ys))
    right.invert_yaxis()
    right.margins(x=0.2)
    right.set_xlabel(f"latency (ms{', log scale' if right.get_xscale() == 'log' else ''})")
    right.set_title(f"{group}: p50 (solid) and p99 (hatched)", loc="left", fontsize=10)


def write(report: Report, directory: Path) -> tuple[Path, Path]:
    """``report.json`` and ``report.png`` in ``directory``; returns their paths."""
    json_path, png_path = directory / "report.json", directory / "report.png"
    write_json(report, json_path)
    write_chart(report, png_path)
    return json_path, png_path


REPORT = Report()
