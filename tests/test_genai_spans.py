"""A model call is an OpenTelemetry GenAI client span: ``chat <model>`` with the
``gen_ai.*`` attributes (operation, provider, models, options, finish reasons, token usage)
and no prompt or answer text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway import tracing
from tests.conftest import API_KEYS, AppFactory, auth, message
from tests.openai_server import ChatServer

SECRET_TEXT = "ZZPHI-potassium-6.1"


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    server = ChatServer()
    server.start()
    yield server
    server.stop()


@pytest.mark.parametrize("stream", [True, False])
async def test_a_model_call_is_a_genai_client_span(
    make_app: AppFactory, chat: ChatServer, stream: bool
) -> None:
    chat.script = [{"content": f"Repeat the test ({SECRET_TEXT})."}]
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    try:
        async with make_app(
            api_keys=orjson.dumps(API_KEYS).decode(), outbound_allowlist=f"127.0.0.1:{chat.port}"
        ) as c:
            spec: dict[str, Any] = {
                "id": "llm",
                "name": "Assistant",
                "type": "openai",
                "config": {
                    "baseUrl": chat.url,
                    "model": chat.model,
                    "apiKey": "sk-test",
                    "maxRetries": 0,
                    "temperature": 0.2,
                    "maxOutputTokens": 300,
                    "stream": stream,
                },
            }
            r = await c.post("/agents", json=spec, headers=auth("admin"))
            assert r.status_code == 201, r.text
            body = {"message": message(f"Latest potassium {SECRET_TEXT}")}
            r = await c.post("/agents/llm/v1/message:send", json=body, headers=auth("alice"))
            assert r.status_code == 200, r.text
            assert r.json()["task"]["status"]["state"] == "completed"
    finally:
        tracing.shutdown()
    found = exporter.get_finished_spans()
    (span,) = [s for s in found if s.name == f"chat {chat.model}"]
    run = next(s for s in found if s.name == "gateway.run")
    assert span.kind == SpanKind.CLIENT
    assert span.parent is not None and span.parent.span_id == run.context.span_id
    attributes = dict(span.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.request.model"] == chat.model
    assert attributes["gen_ai.request.temperature"] == 0.2
    assert attributes["gen_ai.request.max_tokens"] == 300
    assert attributes["gen_ai.response.model"] == chat.model
    assert list(attributes["gen_ai.response.finish_reasons"]) == ["stop"]  # type: ignore[arg-type]
    assert int(attributes["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
    assert int(attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
    for s in found:
        assert SECRET_TEXT not in repr(dict(s.attributes or {})), s.name
