"""The official @a2a-js/sdk client over gRPC, as a user runs it, against a served gateway:
picked from the card's ``supportedInterfaces`` and routed to the agent by the card's
``tenant`` (``tests/clients/a2a_js_grpc.mjs``, run with Node.js)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import orjson
import pytest

from gateway.embedded_redis import free_port
from tests.clients import jssdk
from tests.conftest import API_KEYS
from tests.processes import serving, slow_process_test

SCENARIO = Path(__file__).parent / "clients" / "a2a_js_grpc.mjs"
pytestmark = [
    slow_process_test,
    pytest.mark.skipif(not jssdk.available(), reason="Node.js and npm are not installed"),
]


def test_a_session_with_the_js_client_over_grpc(tmp_path: Path) -> None:
    modules = jssdk.prefix() / "node_modules"
    with serving(
        tmp_path,
        GATEWAY_API_KEYS=orjson.dumps(API_KEYS).decode(),
        GATEWAY_GRPC_PORT=str(free_port()),
    ) as (_, base):
        done = subprocess.run(
            ["node", SCENARIO, base, "key-alice"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "NODE_PATH": str(modules)},
        )
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(done.stdout)
    assert r["sent"]["state"] == "TASK_STATE_COMPLETED"
    assert r["history"] == ["ROLE_AGENT"]
    assert r["data"] == [None, {"patient": {"name": "Zoë", "age": 72}, "flags": [True, None]}]
    assert r["listed"] == [r["sent"]["id"]]
    assert r["canceled"] == "TASK_STATE_CANCELED"
    assert r["stream"][0] == "task" and r["stream"][-1] == "statusUpdate"
    assert "artifactUpdate" in r["stream"]
    assert r["notFound"] == "GrpcTaskNotFoundError"  # the SDK's typed error, from ErrorInfo
    assert r["anonymous"] == 16  # UNAUTHENTICATED
