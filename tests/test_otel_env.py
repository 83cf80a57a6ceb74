"""Tracing configured the standard way: the OTEL_* variables an operator already sets for
every other service (exporter, protocol incl. gRPC, endpoint, sampler, service name and
resource attributes), and a start-up line that states what is in effect."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.otlp_grpc_collector import GrpcCollector
from tests.processes import PROCESS_SECONDS, serving, slow_process_test
from tests.waiting import until_sync

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def collector() -> Iterator[GrpcCollector]:
    server = GrpcCollector().start()
    yield server
    server.stop()


def _config(**env: str) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "config", "check"],
        env={**base, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=PROCESS_SECONDS,
    )
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = orjson.loads(done.stdout)
    return config


@slow_process_test
def test_spans_go_over_otlp_grpc_with_the_standard_variables(
    tmp_path: Path, collector: GrpcCollector
) -> None:
    endpoint = f"http://127.0.0.1:{collector.port}"
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "ward-gateway",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with serving(tmp_path, **env) as (_, base):
        body = {
            "message": {
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": "hi"}],
            }
        }
        r = httpx.post(f"{base}/v1/message:send", json=body, timeout=PROCESS_SECONDS)
        assert r.status_code == 200, r.text
        log = next(tmp_path.glob("serve-*.log"))

        def exported() -> bool:
            return any(s.name == "POST /v1/message:send" for _, s in collector.spans())

        until_sync(exported, timeout=PROCESS_SECONDS, what="the send's span", logs=log)
    resource, span = next((r, s) for r, s in collector.spans() if s.name == "POST /v1/message:send")
    assert resource["service.name"] == "ward-gateway"
    assert resource["deployment.environment"] == "test"
    (started,) = [
        orjson.loads(line)
        for line in log.read_text().splitlines()
        if line.startswith("{") and "effective configuration" in line
    ]
    assert started["config"]["tracing"] == {
        "exporter": "otlp",
        "protocol": "grpc",
        "endpoint": endpoint,
        "sample_ratio": 1.0,
    }
    # The request's log line leads to its trace.
    (request,) = [
        entry
        for entry in (orjson.loads(ln) for ln in log.read_text().splitlines() if ln.startswith("{"))
        if entry["event"] == "request" and entry.get("route") == "/v1/message:send"
    ]
    assert request["trace_id"] == span.trace_id.hex()


def test_the_start_line_states_the_exporter_in_effect() -> None:
    http = _config(OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4318")
    assert http["tracing"]["protocol"] == "http/protobuf"
    assert http["tracing"]["endpoint"] == "http://collector:4318/v1/traces"
    assert _config()["tracing"] == "off"
    assert (
        _config(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318", OTEL_TRACES_EXPORTER="none")["tracing"]
        == "off"
    )
    assert _config(OTEL_TRACES_EXPORTER="console")["tracing"]["exporter"] == "console"
    sampled = _config(
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_TRACES_SAMPLER="parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG="0.25",
    )
    assert sampled["tracing"]["sample_ratio"] == 0.25
    assert sampled["tracing"]["endpoint"] == "http://localhost:4318/v1/traces"
    own = _config(GATEWAY_OTLP_ENDPOINT="http://own:4318", OTEL_TRACES_SAMPLER="always_off")
    assert own["tracing"]["endpoint"] == "http://own:4318/v1/traces"
    assert own["tracing"]["sample_ratio"] == 0.0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_TRACES_SAMPLER", "sometimes"),
    ],
)
def test_a_variable_the_gateway_cannot_follow_is_one_line_and_exit_2(name: str, value: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "OTEL_"))}
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve"],
        env={**base, "PYTHONPATH": str(ROOT), "OTEL_TRACES_EXPORTER": "otlp", name: value},
        capture_output=True,
        text=True,
        timeout=PROCESS_SECONDS,
    )
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"gateway: invalid configuration: {name}: ")
