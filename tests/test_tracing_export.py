"""Tracing off and on: nothing traced when tracing is not configured, and spans sent to the
configured OTLP endpoint when it is."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway import tracing
from gateway.store.keys import EMBEDS
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, message
from tests.http_double import ServedDouble
from tests.tracing_doubles import SENTINEL, Chat, _register, _served, _unindexed
from tests.tracing_doubles import chat as chat


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
