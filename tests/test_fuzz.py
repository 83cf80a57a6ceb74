"""No input, however malformed, gets a 500 or echoes its content."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
