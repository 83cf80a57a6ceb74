"""No input, however malformed, gets a 500 or echoes its content; every operation keeps the
contract openapi.yaml states."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import Case
from schemathesis.config import SchemathesisConfig
from schemathesis.schemas import BaseSchema

from tests.conftest import API_KEYS
from tests.processes import serving

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
# (valid and invalid ones), against a real `gateway serve`; schemathesis checks each answer:
# no 5xx, a documented status, content type and headers, a body that conforms, invalid
# requests refused, valid ones accepted, no answer without credentials, 405 with Allow.

SPEC = Path(__file__).parent.parent / "openapi.yaml"
# Per operation (28 of them); derandomized, so every run sends the same requests. A deeper
# run on demand: GATEWAY_FUZZ_EXAMPLES=2000 pytest tests/test_fuzz.py -k contract
EXAMPLES = int(os.environ.get("GATEWAY_FUZZ_EXAMPLES", "25"))
# Schema-valid requests that a rule beyond the schema may still refuse: a send naming
# unknown referenceTaskIds (400), acceptedOutputModes the agent cannot produce (415) or a
# push configuration (501, documented); a registry entry whose typed config, outbound URL or
# key variable does not pass (400).
RULES = [
    {
        # A send stores a message whether it then blocks or streams its task's events.
        "include-operation-id-regex": "^(sendMessage|sendAgentMessage|streamPost)",
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "415", "501"]
            },
            "not_a_server_error": {"expected-statuses": ["2xx", "4xx", "501"]},
        },
    },
    {
        # The proto-JSON sends take any object: most generated ones fail validation (400).
        "include-operation-id-regex": "^(p03send|v1send|p03stream|v1stream)",
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "400", "401", "403", "404", "409", "415", "501"]
            },
            "not_a_server_error": {"expected-statuses": ["2xx", "4xx", "501"]},
        },
    },
    {
        # JSON-RPC answers every request it can read with 200: its errors are in the body.
        "include-operation-id-regex": "^rpc",
        "checks": {"negative_data_rejection": {"enabled": False}},
    },
    {
        # A pageToken is opaque: one this server did not give is 400.
        "include-operation-id-regex": "^v1list",
        "checks": {
            "positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404"]}
        },
    },
    {
        # Routes refused until push notifications exist: 501 is their answer.
        "include-operation-id-regex": "^refuse",
        "checks": {
            "positive_data_acceptance": {"expected-statuses": ["400", "404", "501"]},
            "not_a_server_error": {"expected-statuses": ["4xx", "501"]},
        },
    },
    {
        # Push configs: a generated URL is not in the allowlist (400), a task id unknown (404).
        "include-operation-id-regex": "^push(03|1)?(Get|Post|Delete)",
        "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "404"]}},
    },
    {
        "include-operation-id-regex": "^(registerAgent|changeAgent)$",
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "400", "401", "403", "404", "409"]
            }
        },
    },
]
CONTRACT: BaseSchema = schemathesis.openapi.from_path(
    SPEC,
    config=SchemathesisConfig.from_dict(
        # Credentials are the admin key sent with each case, not generated ones (which only
        # ever meet the 401 the auth checks already probe).
        {"generation": {"with-security-parameters": False}, "operations": RULES}
    ),
)
# The A2A bindings serve the same handlers under several prefixes (each agent base, the 1.0
# tenant segment, the root for the default agent): each handler is fuzzed once, at the
# default agent's address; the routes themselves are checked in tests/test_openapi.py.
CONTRACT = CONTRACT.exclude(
    path_regex=(
        r"^/agents/\{agent_id\}/(a2a|v1/(message:stream|tasks/\{task_id\}(:subscribe|/push)))"
        r"|\{tenant\}|^/(message:|tasks|extendedAgentCard)"
    )
)
ADMIN = {"Authorization": "Bearer key-admin"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway with API keys and its own embedded Redis (other tests flush theirs)."""
    keys = orjson.dumps(API_KEYS).decode()
    # The fuzzer sends invalid credentials on every operation, on purpose: the throttle of
    # failed authentications (tests/test_rate_limits.py) would answer it 429 before long.
    # Managed keys are on, so the /keys routes are fuzzed too.
    with serving(
        tmp_path_factory.mktemp("contract"),
        GATEWAY_API_KEYS=keys,
        GATEWAY_AUTH_FAILURE_LIMIT="off",
        GATEWAY_API_KEY_SECRET="fuzz-server-secret-0123",
    ) as (_, base):
        yield base


@CONTRACT.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.timeout(240)
def test_every_operation_keeps_the_contract(case: Case[Any], served: str) -> None:
    case.call_and_validate(base_url=served, headers=ADMIN, timeout=30)
