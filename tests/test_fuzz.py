"""No input, however malformed, gets a 500 or echoes its content; every operation keeps the
contract openapi.yaml states."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import API_KEYS
from tests.processes import serving
from tests.waiting import log_tail

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
field_names = st.sampled_from(
    [
        "role",
        "parts",
        "messageId",
        "contextId",
        "taskId",
        "referenceTaskIds",
        "metadata",
        "kind",
        "text",
        "file",
        "data",
        "bytes",
        "uri",
        "blocking",
        "historyLength",
        "acceptedOutputModes",
    ]
)


def mutated(base: Any, path: list[str], value: Any) -> Any:
    """``base`` with the field at ``path`` replaced by ``value`` (created when missing)."""
    if not path or not isinstance(base, dict):
        return value
    out = dict(base)
    out[path[0]] = mutated(out.get(path[0], {}), path[1:], value)
    return out


VALID = {
    "message": {"role": "user", "messageId": "m", "parts": [{"kind": "text", "text": "t"}]},
    "configuration": {"blocking": False},
}

JSON = {"Content-Type": "application/json"}
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))


async def _check(client: httpx.AsyncClient, raw: bytes) -> None:
    r = await client.post("/v1/message:send", content=raw, headers=JSON)
    assert r.status_code < 500, r.text
    body = r.json()
    assert set(body) <= {"task", "error", "code", "message", "data"}


@FUZZ
@given(body=json_values)
async def test_arbitrary_json_is_never_a_500(client: httpx.AsyncClient, body: Any) -> None:
    await _check(client, orjson.dumps(body))


@FUZZ
@given(
    path=st.lists(st.sampled_from(["message", "configuration"]), min_size=1, max_size=1).flatmap(
        lambda head: st.lists(field_names, min_size=1, max_size=3).map(lambda tail: head + tail)
    ),
    value=json_values,
)
async def test_mutated_valid_bodies_are_never_a_500(
    client: httpx.AsyncClient, path: list[str], value: Any
) -> None:
    body = mutated(VALID, path, value)
    if isinstance(body.get("message"), dict):
        body["message"]["messageId"] = orjson.dumps([path, value]).decode()[:200] or "m"
    await _check(client, orjson.dumps(body))


@FUZZ
@given(raw=st.binary(max_size=200))
async def test_arbitrary_bytes_are_never_a_500(client: httpx.AsyncClient, raw: bytes) -> None:
    r = await client.post("/v1/message:send", content=raw, headers=JSON)
    assert r.status_code in (200, 400), r.text


# --- The whole contract: every operation of openapi.yaml, requests generated from its schemas
# (valid and invalid ones) in every phase schemathesis has (examples, coverage, fuzzing, and
# stateful sequences along the links it infers), against a real `gateway serve`; every check:
# no 5xx, a documented status, content type and headers, a body that conforms, invalid
# requests refused, valid ones accepted, no answer without credentials, 405 with Allow,
# nothing served after a delete. schemathesis.toml holds the run's settings and the rules
# beyond the schema each operation may still refuse valid requests by; this is the same
# `schemathesis run` as by hand, on a gateway of its own.

ROOT = Path(__file__).parent.parent
# Per operation; the run is derandomized (schemathesis.toml), so every run sends the same
# requests. A deeper run on demand: GATEWAY_FUZZ_EXAMPLES=500 pytest tests/test_fuzz.py -k contract
EXAMPLES = os.environ.get("GATEWAY_FUZZ_EXAMPLES", "5")
# The A2A bindings serve the same handlers under several prefixes (each agent base, the 1.0
# tenant segment, the root for the default agent): each handler is fuzzed once, at the
# default agent's address, keeping the suite's time; the routes themselves are checked in
# tests/test_openapi.py. (By hand, without this, every operation is fuzzed.)
ALIASES = (
    r"^/agents/\{agent_id\}/(a2a|v1/(message:stream|tasks/\{task_id\}(:subscribe|/push)))"
    r"|\{tenant\}|^/(message:|tasks|extendedAgentCard)"
)
# Generous: it only matters when the run hangs (a normal one takes half a minute, a minute
# on a busy 2-core machine).
RUN_SECONDS = 200


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A gateway with API keys and its own embedded Redis (other tests flush theirs), and
    its log."""
    tmp = tmp_path_factory.mktemp("contract")
    keys = orjson.dumps(API_KEYS).decode()
    # The fuzzer sends invalid credentials on every operation, on purpose: the throttle of
    # failed authentications (tests/test_rate_limits.py) would answer it 429 before long.
    # Managed keys are on, so the /keys routes are fuzzed too.
    with serving(
        tmp,
        GATEWAY_API_KEYS=keys,
        GATEWAY_AUTH_FAILURE_LIMIT="off",
        GATEWAY_API_KEY_SECRET="fuzz-server-secret-0123",
    ) as (_, base):
        yield base, tmp


@pytest.mark.timeout(RUN_SECONDS + 60)
def test_every_operation_keeps_the_contract(served: tuple[str, Path]) -> None:
    base, logs = served
    cli = Path(sys.executable).with_name("schemathesis")
    command = [
        str(cli),
        "--config-file",
        str(ROOT / "schemathesis.toml"),
        "--no-color",
        "run",
        str(ROOT / "openapi.yaml"),
        "--url",
        base,
        "--header",
        "Authorization: Bearer key-admin",
        "--max-examples",
        EXAMPLES,
        "--exclude-path-regex",
        ALIASES,
        "--request-timeout",
        "30",
    ]
    run = subprocess.run(
        command, cwd=logs, capture_output=True, text=True, timeout=RUN_SECONDS, check=False
    )
    assert run.returncode == 0, f"{run.stdout}{run.stderr}{log_tail(logs)}"
