"""Tracing through HTTP against real apps, a real Redis and HTTP doubles: one trace per
send, from the request on one replica to the run on another, recall, the agent's
outbound calls (with a W3C traceparent the servers receive), the indexer and the outbox;
spans that carry ids, sizes, states and timings but never the message's content; nothing
traced when tracing is not configured; OTLP export when it is."""

from __future__ import annotations

import gzip
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway import tracing
from gateway.embedded_redis import free_port
from gateway.longterm.render import cortadel_user_id
from gateway.options.longterm import CortadelSettings
from gateway.store.keys import EMBEDS
from tests.a2a_remote_server import RemoteAgentServer
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, message
from tests.cortadel_server import CortadelServer
from tests.embeddings_server import EmbeddingsServer
from tests.http_double import ServedDouble
from tests.openai_server import ChatServer
from tests.waiting import until

# What a user sends and an agent answers: it must reach the agent, Redis and Cortadel,
# and no span.
SENTINEL = "Sentinel-QX7-hyperkalaemia"
SEND_ROUTE = "POST /agents/{agent_id}/v1/message:send"

ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


def _recording(app: ASGIApp, seen: list[dict[str, str]]) -> ASGIApp:
    """The double's app, noting each request's headers first."""

    async def recorded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    return recorded


class _Headers(ServedDouble):
    headers: list[dict[str, str]]

    def serve(self, app: Any) -> None:
        self.headers = []
        super().serve(_recording(app, self.headers))

    def traceparents(self) -> list[str]:
        return [h["traceparent"] for h in self.headers if "traceparent" in h]


class Chat(_Headers, ChatServer):
    pass


class Remote(_Headers, RemoteAgentServer):
    pass


class Memory(_Headers, CortadelServer):
    pass


class Embeddings(_Headers, EmbeddingsServer):
    pass


class Collector(ServedDouble):
    """An OTLP/HTTP trace receiver: keeps the spans of every export request."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[ExportTraceServiceRequest] = []
        self.raw = b""
        self.serve(Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])]))

    async def _traces(self, request: Request) -> Response:
        body = await request.body()
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        self.raw += body
        self.requests.append(ExportTraceServiceRequest.FromString(body))
        return Response(b"", media_type="application/x-protobuf")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> list[tuple[str, Any]]:
        """(service name, span) of everything received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = next(
                    a.value.string_value
                    for a in resource_spans.resource.attributes
                    if a.key == "service.name"
                )
                for scope_spans in resource_spans.scope_spans:
                    found += [(service, s) for s in scope_spans.spans]
        return found


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory, for the apps this test builds."""
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    yield exporter
    tracing.shutdown()


def _served(double: Any) -> Iterator[Any]:
    server = double.start()
    yield server
    server.stop()


@pytest.fixture
def chat() -> Iterator[Chat]:
    yield from _served(Chat())


@pytest.fixture
def cortadel() -> Iterator[Memory]:
    yield from _served(Memory())


@pytest.fixture
def embeddings() -> Iterator[Embeddings]:
    yield from _served(Embeddings())


# -- helpers ------------------------------------------------------------------------------


def _trace_id(traceparent: str) -> int:
    return int(traceparent.split("-")[1], 16)


def _span_id(traceparent: str) -> int:
    return int(traceparent.split("-")[2], 16)


def _texts(span: ReadableSpan) -> Iterator[str]:
    """Everything a span says: its name, attributes, events, links, status, resource."""

    def flat(attributes: Mapping[str, Any] | None) -> Iterator[str]:
        for key, value in (attributes or {}).items():
            yield key
            yield str(value)

    yield span.name
    yield from flat(span.attributes)
    for event in span.events:
        yield event.name
        yield from flat(event.attributes)
    for link in span.links:
        yield from flat(link.attributes)
    yield span.status.description or ""
    yield from flat(span.resource.attributes)


def _leaks(found: list[ReadableSpan]) -> list[tuple[str, str]]:
    return [(s.name, text) for s in found for text in _texts(s) if SENTINEL.lower() in text.lower()]


def _one(found: list[ReadableSpan], name: str) -> ReadableSpan:
    named = [s for s in found if s.name == name]
    assert len(named) == 1, (name, [s.name for s in found])
    return named[0]


def _parent(span: ReadableSpan) -> int:
    assert span.parent is not None, span.name
    return span.parent.span_id


def _ancestors(span: ReadableSpan, found: list[ReadableSpan]) -> list[str]:
    """The names of the span's ancestors among ``found``, nearest first."""
    by_id = {s.context.span_id: s for s in found}
    names, at = [], span
    while at.parent is not None and at.parent.span_id in by_id:
        at = by_id[at.parent.span_id]
        names.append(at.name)
    return names


def _client_span(found: list[ReadableSpan], url_part: str) -> list[ReadableSpan]:
    return [
        s
        for s in found
        if s.kind == SpanKind.CLIENT and url_part in str((s.attributes or {}).get("http.url", ""))
    ]


async def _register(c: httpx.AsyncClient, spec: dict[str, Any]) -> None:
    r = await c.post("/agents", json=spec, headers=auth("admin"))
    assert r.status_code == 201, r.text


async def _probed(c: httpx.AsyncClient) -> None:
    async def ready() -> bool:
        return bool((await c.get("/readyz")).json()["checks"]["cortadel"] == "ok")

    await until(ready, what="the Cortadel key probe")


# -- one trace per send -------------------------------------------------------------------


async def test_one_trace_follows_a_send_to_another_replica_and_out(
    make_app: AppFactory,
    spans: InMemorySpanExporter,
    chat: Chat,
    cortadel: Memory,
    embeddings: Embeddings,
    redis: RawRedis,
) -> None:
    """The HTTP request on a replica without workers; the run, recall, the model call, the
    indexer and the outbox on another: one trace, and the servers called receive it."""
    cortadel.seed(
        cortadel_user_id("t1", "alice", None, "Patient/7"),
        "Prefers morning appointments on ward 7B",
    )
    chat.script = [{"content": f"Potassium is high ({SENTINEL}); repeat the test."}]
    settings: dict[str, Any] = {
        "api_keys": orjson.dumps(API_KEYS).decode(),
        "outbound_allowlist": f"127.0.0.1:{chat.port}",
        "cortadel": CortadelSettings(
            url=cortadel.url, api_key="cortadel-key", backoff_max_seconds=0.3, timeout_seconds=2.0
        ),
        "embedder": "openai",
        "embedder_url": embeddings.url,
        "embedder_model": embeddings.model,
        "embedder_api_key": "test-key",
    }
    async with make_app(workers=False, **settings) as front, make_app(**settings) as back:
        await _probed(back)
        await _register(
            front,
            {
                "id": "llm",
                "name": "Assistant",
                "type": "openai",
                "config": {"baseUrl": chat.url, "model": chat.model, "apiKey": "sk-test",
                           "maxRetries": 0},
            },
        )  # fmt: skip
        body = {
            "message": message(
                f"Latest potassium: 6.1, ward 7B morning review. {SENTINEL}",
                {"kind": "data", "data": {"finding": SENTINEL, "unit": "mmol/L"}},
                metadata={"note": SENTINEL, "subject": "Patient/7"},
            )
        }
        r = await front.post("/agents/llm/v1/message:send", json=body, headers=auth("alice"))
        assert r.status_code == 200, r.text
        task = r.json()["task"]
        assert task["status"]["state"] == "completed"

        def done() -> list[ReadableSpan]:
            found = list(spans.get_finished_spans())
            names = {s.name for s in found}
            return found if {"gateway.index", "gateway.outbox.store"} <= names else []

        found = await until(done, what="the indexer's and the outbox's spans")
        back_consumer = back.app.state.runtime.queue.consumer  # type: ignore[attr-defined]

    server = _one(found, SEND_ROUTE)
    trace_id = server.context.trace_id
    assert server.kind == SpanKind.SERVER
    assert server.attributes is not None
    assert server.attributes["gateway.task.id"] == task["id"]
    assert server.attributes["gateway.context.id"] == task["contextId"]
    assert server.attributes["http.route"] == "/agents/{agent_id}/v1/message:send"
    assert server.attributes["gateway.request_id"] == r.headers["x-request-id"]
    traced = [s for s in found if s.context.trace_id == trace_id]

    # The run, on the other replica, continues the request's trace.
    run = _one(traced, "gateway.run")
    assert _parent(run) == server.context.span_id
    assert run.attributes is not None
    assert str(run.attributes["gateway.run.attempt"]).startswith(f"{back_consumer}/")
    assert run.attributes["gateway.task.id"] == task["id"]
    assert run.attributes["gateway.task.state"] == "completed"
    assert run.attributes["gateway.run.write"] == "ok"
    # Recall inside it, with Cortadel's HTTP call.
    recall = _one(traced, "gateway.recall")
    assert _parent(recall) == run.context.span_id
    assert recall.attributes is not None
    assert recall.attributes["gateway.recall.outcome"] == "hits"
    assert recall.attributes["gateway.recall.hits"] == 1
    (search,) = _client_span(traced, "/api/v1/memories/search")
    assert _parent(search) == recall.context.span_id
    # The model call (the openai SDK on httpx2), and the model server got the trace.
    (completion,) = _client_span(traced, "/v1/chat/completions")
    assert "gateway.run" in _ancestors(completion, traced)
    (sent,) = chat.traceparents()
    assert _trace_id(sent) == trace_id
    assert _span_id(sent) == completion.context.span_id
    # The indexer's batch is in the send's trace, and so is its embedding call.
    index = _one(traced, "gateway.index")
    assert _parent(index) == server.context.span_id
    assert index.attributes is not None
    assert index.attributes["gateway.index.texts"] == 1
    (embedding,) = _client_span(traced, "/v1/embeddings")
    assert _parent(embedding) == index.context.span_id
    assert [_trace_id(tp) for tp in embeddings.traceparents()] == [trace_id]
    # The outbox's delivery, queued by the run's finishing write, continues the run.
    outbox = _one(traced, "gateway.outbox.store")
    assert _parent(outbox) == run.context.span_id
    assert outbox.attributes is not None
    assert outbox.attributes["gateway.outbox.messages"] == 2
    (store,) = _client_span(traced, "/api/v1/memories/from-conversation")
    assert _parent(store) == outbox.context.span_id
    cortadel_traces = {_trace_id(tp) for tp in cortadel.traceparents()}
    assert trace_id in cortadel_traces
    # Redis commands are spans of the trace, named by command (and script), no arguments.
    # (An EVALSHA may come twice: RawRedis was flushed, the script is loaded and run again.)
    scripts = [s for s in traced if s.name == "EVALSHA send"]
    assert scripts and {_parent(s) for s in scripts} == {server.context.span_id}
    assert {(s.attributes or {}).get("db.statement") for s in scripts} == {"EVALSHA send"}
    assert {"EVALSHA begin_run", "EVALSHA update"} <= {s.name for s in traced}
    statements = {
        str(s.attributes.get("db.statement"))
        for s in found
        if s.attributes and "db.system" in s.attributes
    }
    for line in "\n".join(statements).splitlines():
        assert re.fullmatch(r"[A-Z]+( [A-Z]+)*( \?)*|EVALSHA [a-z_]+", line), line
    # Background polls (XREADGROUP, maintenance) start no traces: every client span has a
    # parent.
    assert [s.name for s in found if s.kind == SpanKind.CLIENT and s.parent is None] == []

    # The content went everywhere it had to, and into no span.
    assert SENTINEL in orjson.dumps(chat.requests).decode()
    assert any(SENTINEL in str(call["body"]) for call in cortadel.calls)
    assert any(SENTINEL in str(call["input"]) for call in embeddings.calls)
    # ...and Redis holds it sealed (encryption at rest): the messages are there, the text not
    stored = [await redis.hgetall(k) async for k in redis.scan_iter(match="gw:*:msgs")]
    assert stored and not [m for m in stored if SENTINEL.encode() in str(m).encode()]
    assert _leaks(found) == []


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


async def test_a_batch_is_a_child_of_its_first_job_and_links_the_others(
    spans: InMemorySpanExporter,
) -> None:
    first = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    second = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-01"
    with tracing.job_span("gateway.index", [first, second, first, ""]):
        pass
    (batch,) = spans.get_finished_spans()
    assert batch.context.trace_id == _trace_id(first)
    assert _parent(batch) == _span_id(first)
    assert [(lk.context.trace_id, lk.context.span_id) for lk in batch.links] == [
        (_trace_id(second), _span_id(second))
    ]
    assert batch.kind == SpanKind.CONSUMER


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


def _unindexed() -> dict[str, Any]:
    """Settings whose indexer cannot reach its embedder: embedding jobs stay in their
    stream (retried, never acknowledged), where a test can read them."""
    return {
        "embedder": "openai",
        "embedder_url": f"http://127.0.0.1:{free_port()}/v1",
        "embedder_api_key": "test-key",
    }


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


# -- off, and on through OTLP -------------------------------------------------------------


async def test_nothing_is_traced_when_not_configured(
    make_app: AppFactory, chat: Chat, redis: RawRedis
) -> None:
    assert not tracing.enabled()
    async with make_app(
        api_keys=orjson.dumps(API_KEYS).decode(),
        outbound_allowlist=f"127.0.0.1:{chat.port}",
        **_unindexed(),
    ) as c:
        runtime = c.app.state.runtime  # type: ignore[attr-defined]
        assert not any(
            m.cls is tracing.TracingMiddleware
            for m in c.app.user_middleware  # type: ignore[attr-defined]
        )
        for instrumented in (runtime.client, *runtime.outbound):
            assert not getattr(instrumented, "_is_instrumented_by_opentelemetry", False)
        await _register(
            c,
            {
                "id": "llm",
                "name": "Assistant",
                "type": "openai",
                "config": {"baseUrl": chat.url, "model": chat.model, "apiKey": "sk-test"},
            },
        )
        r = await c.post(
            "/agents/llm/v1/message:send", json={"message": message("hello")}, headers=auth("alice")
        )
        assert r.status_code == 200, r.text
    assert chat.headers and chat.traceparents() == []
    (entry,) = await redis.xrange(EMBEDS)
    assert "tp" not in orjson.loads(entry[1][b"job"])


@pytest.fixture
def collector() -> Iterator[Collector]:
    yield from _served(Collector())
    tracing.shutdown()  # whatever the test left configured


async def test_spans_go_to_the_configured_otlp_endpoint(
    make_app: AppFactory, collector: Collector
) -> None:
    async with make_app(otlp_endpoint=collector.url) as c:
        assert tracing.enabled()
        r = await c.post("/v1/message:send", json={"message": message(f"hi {SENTINEL}")})
        assert r.status_code == 200, r.text
        tracing.shutdown()  # flushes the batch
    received = collector.spans()
    names = {span.name for _, span in received}
    assert {"POST /v1/message:send", "gateway.run", "EVALSHA send"} <= names
    assert {service for service, _ in received} == {"gateway"}
    (server,) = [s for _, s in received if s.name == "POST /v1/message:send"]
    (run,) = [s for _, s in received if s.name == "gateway.run"]
    assert run.trace_id == server.trace_id and run.parent_span_id == server.span_id
    assert SENTINEL.encode() not in collector.raw
