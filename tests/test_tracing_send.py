"""Tracing one send through HTTP against real apps, a real Redis and HTTP doubles: one
trace from the request on one replica to the run on another, recall, the agent's outbound
calls (with a W3C traceparent the servers receive), the indexer and the outbox; spans that
carry ids, sizes, states and timings but never the message's content; a batch as a child of
its first job."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway import tracing
from gateway.longterm.render import cortadel_user_id
from gateway.options.longterm import CortadelSettings
from tests.conftest import API_KEYS, AppFactory, RawRedis, auth, message
from tests.cortadel_server import CortadelServer
from tests.embeddings_server import EmbeddingsServer
from tests.tracing_doubles import (
    SEND_ROUTE,
    SENTINEL,
    Chat,
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
)
from tests.tracing_doubles import chat as chat
from tests.tracing_doubles import spans as spans
from tests.waiting import until


class Memory(_Headers, CortadelServer):
    pass


class Embeddings(_Headers, EmbeddingsServer):
    pass


@pytest.fixture
def cortadel() -> Iterator[Memory]:
    yield from _served(Memory())


@pytest.fixture
def embeddings() -> Iterator[Embeddings]:
    yield from _served(Embeddings())


async def _probed(c: httpx.AsyncClient) -> None:
    async def ready() -> bool:
        return bool((await c.get("/readyz")).json()["checks"]["cortadel"] == "ok")

    await until(ready, what="the Cortadel key probe")


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
