"""Tracing of requests: a remote agent receives the caller's trace, requests are traced
without queries, probes or scrapes, and a request left out by sampling carries that on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway import tracing
from gateway.store.keys import EMBEDS
from tests.a2a_remote_server import RemoteAgentServer
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, message
from tests.tracing_doubles import (
    SEND_ROUTE,
    SENTINEL,
    _ancestors,
    _client_span,
    _Headers,
    _leaks,
    _one,
    _parent,
    _register,
    _served,
    _span_id,
    _trace_id,
    _unindexed,
)
from tests.tracing_doubles import spans as spans


class Remote(_Headers, RemoteAgentServer):
    pass


@pytest.fixture(params=["JSONRPC", "HTTP+JSON"])
def remote(request: pytest.FixtureRequest) -> Iterator[Remote]:
    yield from _served(Remote(request.param))


async def test_a_remote_agent_receives_the_callers_trace(
    make_app: AppFactory, spans: InMemorySpanExporter, remote: Remote
) -> None:
    """A client's own traceparent is continued, through the job, to the remote agent."""
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with make_app(
        api_keys=orjson.dumps(API_KEYS).decode(), outbound_allowlist=f"127.0.0.1:{remote.port}"
    ) as c:
        spec = {
            "id": "cardio",
            "name": "Cardiology",
            "type": "a2a-remote",
            "config": {"cardUrl": remote.card_url, "pollIntervalSeconds": 0.05},
        }
        await _register(c, spec)
        r = await c.post(
            "/agents/cardio/v1/message:send",
            json={"message": message(f"troponin 0.8, chest pain, {SENTINEL}")},
            headers={**auth("alice"), "traceparent": caller},
        )
        assert r.status_code == 200, r.text
        assert r.json()["task"]["status"]["state"] == "completed"
        found = list(spans.get_finished_spans())

    server = _one(found, SEND_ROUTE)
    assert server.context.trace_id == _trace_id(caller)
    assert _parent(server) == _span_id(caller)
    run = _one(found, "gateway.run")
    assert run.context.trace_id == _trace_id(caller)
    calls = [
        s
        for s in _client_span(found, f"127.0.0.1:{remote.port}")
        if s.context.trace_id == run.context.trace_id
    ]
    assert calls and all("gateway.run" in _ancestors(s, found) for s in calls)
    received = [tp for tp in remote.traceparents() if _trace_id(tp) == _trace_id(caller)]
    assert {_span_id(tp) for tp in received} == {s.context.span_id for s in calls}
    assert remote.seen[0]["text"].endswith(SENTINEL)
    assert _leaks(found) == []


async def test_requests_are_traced_without_queries_probes_or_scrapes(
    client_traced: httpx.AsyncClient, spans: InMemorySpanExporter
) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert (await client_traced.get(path)).status_code == 200
    r = await client_traced.get(f"/v1/contexts?limit=5&note={SENTINEL}")
    assert r.status_code == 200
    r = await client_traced.get("/v1/tasks/0b7cbe8e-4a63-4b8c-9b0e-2b8c3f0d9c11")
    assert r.status_code == 404
    found = list(spans.get_finished_spans())
    servers = [s for s in found if s.kind == SpanKind.SERVER]
    assert sorted(s.name for s in servers) == ["GET /v1/contexts", "GET /v1/tasks/{task_id}"]
    statuses = {s.name: (s.attributes or {}).get("http.status_code") for s in servers}
    assert statuses["GET /v1/tasks/{task_id}"] == 404
    assert _leaks(found) == []


async def test_a_request_left_out_by_sampling_carries_that_on(
    make_app: AppFactory, redis: RawRedis
) -> None:
    """Sampled at 0: nothing is recorded, and the job carries a traceparent marked not
    sampled (its run and embedding follow the decision); a caller's sampled traceparent is
    still followed."""
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter), sample_ratio=0.0)
    try:
        async with make_app(**_unindexed()) as c:
            r = await c.post("/v1/message:send", json={"message": message("left out")})
            assert r.status_code == 200, r.text
            assert exporter.get_finished_spans() == ()
            caller = "00-5bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            r = await c.post(
                "/v1/message:send",
                json={"message": message("kept")},
                headers={"traceparent": caller},
            )
            assert r.status_code == 200, r.text
            found = exporter.get_finished_spans()
    finally:
        tracing.shutdown()
    assert {s.context.trace_id for s in found} == {_trace_id(caller)}
    assert {"POST /v1/message:send", "gateway.run"} <= {s.name for s in found}
    jobs = [orjson.loads(fields[b"job"]) for _, fields in await redis.xrange(EMBEDS)]
    left_out, kept = (job["tp"] for job in jobs)
    assert left_out.endswith("-00") and _trace_id(left_out) != _trace_id(caller)
    assert kept.endswith("-01") and _trace_id(kept) == _trace_id(caller)


@pytest.fixture
async def client_traced(
    spans: InMemorySpanExporter, make_app: AppFactory
) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app() as c:
        yield c
