"""Prometheus metrics, read over HTTP from a real gateway: requests per binding and route
template, runs per agent type and outcome, task state changes, queue figures, the separate
metrics port, and the Grafana dashboard in deploy/ against what /metrics exports.

Counters are process-wide and other tests move them too, so each test compares before
and after; no label may ever hold an id."""

from __future__ import annotations

import re
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.agents import Partial
from tests.conftest import API_KEYS, AppFactory, auth, message
from tests.waiting import until

DASHBOARD = Path(__file__).parent.parent / "deploy" / "grafana" / "gateway-dashboard.json"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(c: httpx.AsyncClient) -> tuple[str, Samples]:
    r = await c.get("/metrics")
    assert r.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return r.text, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def post(
    c: httpx.AsyncClient,
    *parts: str,
    base: str = "",
    blocking: bool = True,
    headers: dict[str, str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    body = {"message": message(*parts, **fields), "configuration": {"blocking": blocking}}
    r = await c.post(f"{base}/v1/message:send", json=body, headers=headers)
    assert r.status_code == 200, r.text
    task: dict[str, Any] = r.json()["task"]
    return task


def echo(**options: Any) -> dict[str, Any]:
    return {"echo": options}


@pytest.fixture
async def gw(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    """Keys, the allowlist for registered agents' (unreachable) endpoints, a plugin."""
    async with make_app(
        [Partial()], api_keys=orjson.dumps(API_KEYS).decode(), outbound_allowlist="127.0.0.1:*"
    ) as c:
        yield c


# -- HTTP -----------------------------------------------------------------------------------


async def test_requests_are_counted_per_route_template_and_status(
    client: httpx.AsyncClient,
) -> None:
    _, before = await scrape(client)
    task = await post(client, "hello")
    tid = task["id"]
    assert (await client.get(f"/v1/tasks/{tid}")).status_code == 200
    assert (await client.get(f"/v1/tasks/{uuid.uuid4()}")).status_code == 404
    assert (await client.post(f"/v1/tasks/{tid}:cancel")).status_code == 409  # completed
    await post(client, "again", base="/agents/echo", contextId=task["contextId"])
    stray = uuid.uuid4().hex
    assert (await client.get(f"/nowhere/{stray}")).status_code == 404
    assert (await client.request("BREW", f"/v1/contexts/{stray}")).status_code == 405
    text, after = await scrape(client)

    def requests(method: str, route: str, status: str) -> float:
        labels = {"binding": "rest", "method": method, "route": route, "status": status}
        return moved(before, after, "gateway_requests_total", **labels)

    assert requests("POST", "/v1/message:send", "200") == 1
    assert requests("POST", "/agents/{agent_id}/v1/message:send", "200") == 1
    assert requests("GET", "/v1/tasks/{task_id}", "200") == 1
    assert requests("GET", "/v1/tasks/{task_id}", "404") == 1
    assert requests("POST", "/v1/tasks/{task_id}:cancel", "409") == 1
    assert requests("GET", "unmatched", "404") == 1
    assert requests("OTHER", "/v1/contexts/{context_id}", "405") == 1  # methods are bounded
    send = {"binding": "rest", "method": "POST", "route": "/v1/message:send"}
    assert moved(before, after, "gateway_request_seconds_count", **send) == 1
    assert moved(before, after, "gateway_request_seconds_bucket", le="+Inf", **send) == 1
    assert value(after, "gateway_request_seconds_sum", **send) > 0
    for secret in (tid, task["contextId"], stray, "BREW"):
        assert secret not in text  # ids and raw methods label nothing
    routes = {dict(k[1]).get("route") for k in after if k[0] == "gateway_requests_total"}
    assert all(r == "unmatched" or (r or "").startswith("/") for r in routes), routes


async def test_requests_refused_before_routing_keep_their_route(
    keyed: httpx.AsyncClient,
) -> None:
    _, before = await scrape(keyed)
    tid = str(uuid.uuid4())
    assert (await keyed.get(f"/v1/tasks/{tid}")).status_code == 401  # no credentials
    wrong_host = await keyed.get("/v1/contexts", headers={"Host": "evil.example"})
    assert wrong_host.status_code == 421
    text, after = await scrape(keyed)
    labels = {"binding": "rest", "method": "GET"}
    assert moved(before, after, "gateway_requests_total", route="/v1/tasks/{task_id}",
                 status="401", **labels) == 1  # fmt: skip
    assert moved(before, after, "gateway_requests_total", route="/v1/contexts",
                 status="421", **labels) == 1  # fmt: skip
    assert tid not in text


async def test_mcp_is_its_own_binding(client: httpx.AsyncClient) -> None:
    _, before = await scrape(client)
    r = await client.post("/mcp", content=b"{", headers={"Content-Type": "application/json"})
    assert r.status_code >= 400
    _, after = await scrape(client)
    rows = [k for k in after if k[0] == "gateway_requests_total" and ("route", "/mcp") in k[1]]
    assert rows and all(("binding", "mcp") in k[1] for k in rows)
    assert sum(moved(before, after, k[0], **dict(k[1])) for k in rows) == 1


# -- runs and tasks -------------------------------------------------------------------------


async def register(c: httpx.AsyncClient, spec: dict[str, Any]) -> None:
    r = await c.post("/agents", json=spec, headers=auth("admin"))
    assert r.status_code == 201, r.text


async def test_runs_are_counted_by_agent_type_and_outcome(gw: httpx.AsyncClient) -> None:
    ids = {"echo": "ward-7-notes", "openai": "ward-7-summariser", "a2a-remote": "ward-7-remote"}
    await register(gw, {"id": ids["echo"], "name": "Notes", "type": "echo"})
    closed = "http://127.0.0.1:9"  # nothing listens: the runs fail
    await register(gw, {"id": ids["openai"], "name": "Summariser", "type": "openai",
                        "config": {"baseUrl": f"{closed}/v1", "model": "m", "apiKey": "k",
                                   "maxRetries": 0}})  # fmt: skip
    await register(gw, {"id": ids["a2a-remote"], "name": "Remote", "type": "a2a-remote",
                        "config": {"cardUrl": f"{closed}/.well-known/agent-card.json"}})  # fmt: skip
    _, before = await scrape(gw)
    alice = auth("alice")
    sent = [
        await post(gw, "a", headers=alice),
        await post(gw, "b", headers=alice, metadata=echo(finalState="failed")),
        await post(gw, "c", headers=alice, metadata=echo(finalState="input-required")),
        await post(gw, "d", base=f"/agents/{ids['echo']}", headers=alice),
        await post(gw, "e", base=f"/agents/{ids['openai']}", headers=alice),
        await post(gw, "f", base=f"/agents/{ids['a2a-remote']}", headers=alice),
        await post(gw, "g", base="/agents/partial", headers=alice),
    ]
    text, after = await scrape(gw)

    def runs(agent: str, outcome: str) -> float:
        return moved(before, after, "gateway_runs_total", agent=agent, outcome=outcome)

    assert [t["status"]["state"] for t in sent] == [
        "completed", "failed", "input-required", "completed", "failed", "failed", "completed",
    ]  # fmt: skip
    assert runs("echo", "completed") == 2  # the built-in echo and a registered echo entry
    assert runs("echo", "failed") == 1
    assert runs("echo", "input-required") == 1
    assert runs("openai", "failed") == 1
    assert runs("a2a-remote", "failed") == 1
    assert runs("plugin", "completed") == 1
    for agent, count in (("echo", 4), ("openai", 1), ("a2a-remote", 1), ("plugin", 1)):
        assert moved(before, after, "gateway_run_seconds_count", agent=agent) == count
    for agent_id in ids.values():
        assert agent_id not in text  # registered ids are unbounded: only types label runs
    for t in sent:
        assert t["id"] not in text and t["contextId"] not in text


async def test_task_state_changes_and_stopped_runs(client: httpx.AsyncClient) -> None:
    """A run held open: marked working, interrupted by a later message, which is then
    canceled; every change of state is counted once, and each run's end by its cause."""
    _, before = await scrape(client)
    held = echo(delayMs=60_000)  # runs for a minute unless stopped
    task = await post(client, "first", blocking=False, metadata=held)
    tid, cid = task["id"], task["contextId"]

    async def state() -> str:
        got: str = (await client.get(f"/v1/tasks/{tid}")).json()["status"]["state"]
        return got

    await until(lambda: _is(state, "working"), what="the run to be marked working")
    await post(client, "second", blocking=False, taskId=tid, contextId=cid,
               metadata={**held, "runPolicy": "interrupt"})  # fmt: skip

    async def ended(outcome: str) -> bool:
        _, now = await scrape(client)
        return moved(before, now, "gateway_runs_total", agent="echo", outcome=outcome) == 1

    await until(lambda: ended("interrupted"), what="the first run to end interrupted")
    await until(lambda: _is(state, "working"), what="the second run to be marked working")
    assert (await client.post(f"/v1/tasks/{tid}:cancel")).status_code == 200
    await until(lambda: ended("canceled"), what="the second run to end canceled")
    _, after = await scrape(client)

    def entered(s: str) -> float:
        return moved(before, after, "gateway_task_transitions_total", state=s)

    # submitted by each send; working by each run; canceled by the cancel
    assert (entered("submitted"), entered("working"), entered("canceled")) == (2, 2, 1)
    assert entered("completed") == 0


async def _is(read: Any, expected: str) -> bool:
    return bool(await read() == expected)


# -- queues ---------------------------------------------------------------------------------


async def test_queue_figures_reach_metrics(make_app: AppFactory) -> None:
    """Runs and embeddings queued on a replica without workers: depth and lag, published
    every few seconds by every process."""
    async with make_app(workers=False) as c:
        for i in range(5):
            await post(c, f"m{i}", blocking=False)

        async def published() -> Samples | None:
            _, now = await scrape(c)
            figures = (value(now, "gateway_jobs_queued"), value(now, "gateway_embed_queued"))
            return now if figures == (5, 5) else None

        now = await until(published, what="the queue figures to be published")
        assert value(now, "gateway_jobs_pending") == 0
        assert value(now, "gateway_jobs_lag_seconds") > 0
        assert value(now, "gateway_embed_lag_seconds") > 0


# -- where /metrics is served ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_metrics_port_serves_metrics_instead_of_the_api_port(make_app: AppFactory) -> None:
    port = _free_port()
    async with make_app(metrics_port=port, host="127.0.0.1") as c:
        assert (await c.get("/metrics")).status_code == 404
        await post(c, "hi")
        async with httpx.AsyncClient() as plain:
            r = await plain.get(f"http://127.0.0.1:{port}/metrics")
    assert r.status_code == 200
    assert 'route="/v1/message:send"' in r.text


async def test_metrics_need_no_credentials(keyed: httpx.AsyncClient) -> None:
    assert (await keyed.get("/metrics")).status_code == 200


# -- the dashboard --------------------------------------------------------------------------

# Not metric names: PromQL keywords (functions are followed by "(").
_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
     "offset", "bool", "inf", "nan"}
)  # fmt: skip
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_VARIABLES = re.compile(r"\$\{[^}]*\}|\$\w+")
_IDENT = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def promql_metrics(expr: str) -> set[str]:
    """The metric names an expression selects."""
    for pattern in (_STRINGS, _VARIABLES, _MATCHERS, _RANGES, _GROUPING):
        expr = pattern.sub(" ", expr)
    return {m[1] for m in _IDENT.finditer(expr) if not m[2] and m[1] not in _KEYWORDS}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def test_promql_metric_names_are_extracted() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, route) (rate(gateway_request_seconds_bucket'
        '{route=~"/v1/.*", status!="5xx"}[$__rate_interval]))) / ignoring(x) group_left '
        "sum(rate(other_total[5m] offset 1h)) or on(instance) up"
    )  # fmt: skip
    assert promql_metrics(expr) == {"gateway_request_seconds_bucket", "other_total", "up"}


def _sample_names(family: Any) -> set[str]:
    """The series names a family exports (a labelled family may have no sample yet)."""
    suffixes = {
        "counter": ("_total",),
        "histogram": ("_bucket", "_count", "_sum"),
        "summary": ("_count", "_sum", ""),
        "info": ("_info",),
    }.get(family.type, ("",))
    return {family.name + s for s in suffixes} | {s.name for s in family.samples}


async def test_dashboard_charts_exactly_what_the_gateway_exports(client: httpx.AsyncClient) -> None:
    dashboard = orjson.loads(DASHBOARD.read_bytes())
    panels = list(_panels(dashboard["panels"]))
    charted: set[str] = set()
    for panel in panels:
        for target in panel.get("targets", []):
            charted |= promql_metrics(target["expr"])
    (note,) = [p for p in panels if p.get("title") == "Metrics not charted"]
    not_charted = set(re.findall(r"`([a-z_:]+)`", note["options"]["content"]))
    assert charted and not_charted and not charted & not_charted

    task = await post(client, "traffic")  # every labelled family of the core gets a series
    await client.get(f"/v1/tasks/{task['id']}")
    await client.get("/nowhere")
    text = (await client.get("/metrics")).text
    families = {f.name: _sample_names(f) for f in text_string_to_metric_families(text)}
    exported = set().union(*families.values())
    missing = charted - exported
    if sys.platform != "linux":  # the process collector reads /proc
        missing = {m for m in missing if not m.startswith("process_")}
    assert not missing, f"the dashboard charts metrics the gateway does not export: {missing}"
    assert not not_charted - exported, "listed as not charted, but not exported"
    unaccounted = {
        name for name, series in families.items() if not series & (charted | not_charted)
    }
    assert not unaccounted, f"exported but neither charted nor listed as not: {unaccounted}"
    for core in ("gateway_requests_total", "gateway_runs_total", "gateway_task_transitions_total"):
        assert core in {s.name for f in text_string_to_metric_families(text) for s in f.samples}
