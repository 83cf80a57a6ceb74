"""Every binding's requests by operation and A2A outcome: in /metrics, the access log and the
request's span. JSON-RPC answers a failed call with HTTP 200; its outcome is still the
A2A error's name, per method, per element of a batch."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway import tracing
from gateway.logs import JsonFormatter
from tests.conftest import message
from tests.test_metrics import moved, scrape

OPS = "gateway_operations_total"
UNKNOWN = str(uuid.uuid4())


def rpc(method: str, params: dict[str, Any], id_: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def access_log() -> Iterator[_Lines]:
    handler = _Lines()
    logger = logging.getLogger("gateway.access")
    logger.addHandler(handler)
    level, logger.level = logger.level, logging.INFO
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_a_failed_jsonrpc_call_counts_as_its_a2a_error(client: httpx.AsyncClient) -> None:
    _, before = await scrape(client)
    r = await client.post("/", json=rpc("tasks/get", {"id": UNKNOWN}))
    assert r.status_code == 200 and r.json()["error"]["code"] == -32001
    r = await client.post("/", json=rpc("message/send", {"message": message("hi")}))
    assert r.status_code == 200 and "result" in r.json()
    _, after = await scrape(client)
    labels = {"binding": "jsonrpc", "operation": "tasks/get"}
    assert moved(before, after, OPS, **labels, outcome="TaskNotFoundError") == 1
    assert moved(before, after, OPS, **labels, outcome="ok") == 0
    assert moved(before, after, OPS, binding="jsonrpc", operation="message/send", outcome="ok") == 1


async def test_each_element_of_a_batch_is_an_operation(client: httpx.AsyncClient) -> None:
    _, before = await scrape(client)
    batch = [
        rpc("tasks/get", {"id": UNKNOWN}, 1),
        rpc("message/send", {"message": message("one")}, 2),
        rpc("no/such", {}, 3),
    ]
    r = await client.post("/", json=batch)
    assert r.status_code == 200 and len(r.json()) == 3
    _, after = await scrape(client)
    assert (
        moved(
            before,
            after,
            OPS,
            binding="jsonrpc",
            operation="tasks/get",
            outcome="TaskNotFoundError",
        )
        == 1
    )
    assert moved(before, after, OPS, binding="jsonrpc", operation="message/send", outcome="ok") == 1
    # A method that is not one of ours is "unknown": client text never becomes a label.
    assert (
        moved(
            before,
            after,
            OPS,
            binding="jsonrpc",
            operation="unknown",
            outcome="MethodNotFoundError",
        )
        == 1
    )


async def test_a_rest_error_counts_as_its_a2a_error(client: httpx.AsyncClient) -> None:
    _, before = await scrape(client)
    assert (await client.get(f"/v1/tasks/{UNKNOWN}")).status_code == 404
    _, after = await scrape(client)
    labels = {"binding": "rest", "operation": "/v1/tasks/{task_id}"}
    assert moved(before, after, OPS, **labels, outcome="TaskNotFoundError") == 1


async def test_the_access_log_names_the_operation_and_never_the_path(
    make_app: Any, access_log: _Lines
) -> None:
    async with make_app(log_requests=True) as client:
        await client.post("/", json=rpc("tasks/get", {"id": UNKNOWN}))
        await client.get(f"/v1/tasks/{UNKNOWN}?note=ZZPHI")
    entries = [orjson.loads(line) for line in access_log.lines]
    rpc_line, rest_line = entries[-2:]
    assert (rpc_line["binding"], rpc_line["operation"], rpc_line["outcome"]) == (
        "jsonrpc",
        "tasks/get",
        "TaskNotFoundError",
    )
    assert rest_line["route"] == "/v1/tasks/{task_id}" and rest_line["status"] == 404
    assert rest_line["outcome"] == "TaskNotFoundError"
    assert rest_line["ts"].endswith("Z") and len(rest_line["ts"]) == len("2026-01-01T00:00:00.000Z")
    for line in access_log.lines[-2:]:
        assert UNKNOWN not in line and "ZZPHI" not in line


async def test_a_jsonrpc_span_is_named_by_its_method_with_its_outcome(
    make_app: Any, access_log: _Lines
) -> None:
    exporter = InMemorySpanExporter()
    tracing.install(SimpleSpanProcessor(exporter))
    try:
        async with make_app(log_requests=True) as c:
            await c.post("/", json=rpc("tasks/get", {"id": UNKNOWN}))
    finally:
        tracing.shutdown()
    (server,) = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    attributes = dict(server.attributes or {})
    assert server.name == "tasks/get"
    assert attributes["rpc.system"] == "jsonrpc" and attributes["rpc.method"] == "tasks/get"
    assert attributes["a2a.outcome"] == "TaskNotFoundError"
    assert attributes["error.type"] == "TaskNotFoundError"
    # The log line of the request carries the span's trace and span ids.
    line = orjson.loads(access_log.lines[-1])
    assert line["trace_id"] == format(server.context.trace_id, "032x")
    assert line["span_id"] == format(server.context.span_id, "016x")
