"""The chat-model double the tracing tests send through (noting the headers it receives),
the exporter that keeps the finished spans, and the helpers that read a trace."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway import tracing
from gateway.embedded_redis import free_port
from tests.conftest import auth
from tests.http_double import ServedDouble
from tests.openai_server import ChatServer

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


def _unindexed() -> dict[str, Any]:
    """Settings whose indexer cannot reach its embedder: embedding jobs stay in their
    stream (retried, never acknowledged), where a test can read them."""
    return {
        "embedder": "openai",
        "embedder_url": f"http://127.0.0.1:{free_port()}/v1",
        "embedder_api_key": "test-key",
    }
