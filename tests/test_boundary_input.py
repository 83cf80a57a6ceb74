"""The boundary's strict input: input that would have given a 500, integers as one
contract, JSON content types, the gateway's own bodies refusing unknown fields, and no input
echoed in an error."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from gateway.http.params import MAX_JSON_DEPTH
from tests.conftest import API_KEYS, AppFactory, Send, auth, message

JSON = {"Content-Type": "application/json"}


def nested(depth: int) -> Any:
    """An object ``depth`` levels deep (the outermost counting as one)."""
    value: Any = {"leaf": 1}
    for _ in range(depth - 1):
        value = {"n": value}
    return value


def _errors(r: httpx.Response) -> set[str]:
    return {e["field"] for e in r.json().get("data", {}).get("errors", [])}


# --- 3. input that used to give 500 -----------------------------------------------------


def nested_raw(depth: int) -> bytes:
    """``nested(depth)`` as JSON text, however deep (encoders stop at a few hundred)."""
    return b'{"n":' * (depth - 1) + b'{"leaf":1}' + b"}" * (depth - 1)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 200, 254, 300, 2000])
@pytest.mark.parametrize("where", ["data", "metadata"])
async def test_nesting_beyond_the_limit_is_400(
    client: httpx.AsyncClient, where: str, depth: int
) -> None:
    # The value sits under message.parts[0] (4 levels), which count towards the limit.
    part = b'{"kind": "data", "data": {"x": 1}, "%s": %s}' % (where.encode(), nested_raw(depth))
    body = b'{"message": {"role": "user", "messageId": "m", "parts": [%s]}}' % part
    r = await client.post("/v1/message:send", content=body, headers=JSON)
    assert r.status_code == 400, r.text
    assert r.json()["error"] in ("InvalidParamsError", "JSONParseError")


async def test_nesting_up_to_the_limit_is_stored_and_returned(send: Send) -> None:
    # {"message": {"parts": [{"data": X}]}}: X starts at level 5.
    r = await send(
        {"kind": "data", "data": nested(MAX_JSON_DEPTH - 4)}, configuration={"historyLength": 1}
    )
    assert r.status_code == 200, r.text
    assert r.json()["task"]["history"][0]["parts"][0]["data"] == nested(MAX_JSON_DEPTH - 4)
    over = await send({"kind": "data", "data": nested(MAX_JSON_DEPTH - 3)})
    assert over.status_code == 400 and _errors(over) == {"body"}


@pytest.mark.parametrize(
    "path",
    ["/v1/contexts", "/v1/contexts/c", "/agents/echo/v1/contexts", "/agents/echo/v1/contexts/c"],
)
@pytest.mark.parametrize("offset", [str(2**63), str(2**64), str(2**31), "1" + "0" * 40])
async def test_huge_offsets_are_400(client: httpx.AsyncClient, path: str, offset: str) -> None:
    r = await client.get(path, params={"offset": offset})
    assert r.status_code == 400, r.text
    assert _errors(r) == {"offset"}


async def test_largest_offset_is_an_empty_page(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/contexts", params={"offset": str(2**31 - 1)})
    assert r.status_code == 200 and r.json()["items"] == []


@pytest.mark.parametrize(
    "field", ["name", "type", "skills", "description", "systemPrompt", "config"]
)
async def test_patching_a_field_to_null_is_400(client: httpx.AsyncClient, field: str) -> None:
    spec = {"id": "scribe", "name": "Scribe", "type": "echo"}
    assert (await client.post("/agents", json=spec)).status_code == 201
    r = await client.patch("/agents/scribe", json={field: None})
    assert r.status_code == 400, r.text
    assert _errors(r) == {field}
    assert (await client.get("/agents/scribe")).json()["revision"] == 1


# --- 4. strict integers, one contract -----------------------------------------------------


@pytest.mark.parametrize(
    "configuration",
    [
        {"historyLength": True},
        {"historyLength": "3"},
        {"historyLength": 3.5},
        {"historyLength": 1e20},
        {"historyLength": 2**31},
        {"blocking": "true"},
        {"blocking": 1},
    ],
)
async def test_body_scalars_are_not_coerced(send: Send, configuration: dict[str, Any]) -> None:
    r = await send("x", configuration=configuration)
    assert r.status_code == 400, r.text
    assert _errors(r) == {f"configuration.{next(iter(configuration))}"}


async def test_integers_may_be_written_as_json_schema_allows(send: Send) -> None:
    # JSON Schema's integer is a number without a fractional part: 2.0 is one, as is 2.
    r = await send("x", configuration={"historyLength": 2.0})
    assert r.status_code == 200 and len(r.json()["task"]["history"]) == 2


@pytest.mark.parametrize("raw", ["1e20", " 3", "3 ", "+3", "३", "0x3", "3.0", "", "-0", "٣"])
async def test_query_integers_are_ascii_digits(
    client: httpx.AsyncClient, send: Send, raw: str
) -> None:
    tid = (await send("x")).json()["task"]["id"]
    for name in ("historyLength", "history_length"):
        r = await client.get(f"/v1/tasks/{tid}", params={name: raw})
        assert r.status_code == 400, (name, raw, r.text)
        assert _errors(r) == {name}
    r = await client.get("/v1/contexts", params={"limit": raw})
    assert r.status_code == 400 and _errors(r) == {"limit"}


async def test_both_spellings_of_history_length_are_checked(
    client: httpx.AsyncClient, send: Send
) -> None:
    tid = (await send("x")).json()["task"]["id"]
    r = await client.get(
        f"/v1/tasks/{tid}", params={"historyLength": "1", "history_length": "-12386"}
    )
    assert r.status_code == 400 and _errors(r) == {"history_length"}
    r = await client.get(f"/v1/tasks/{tid}", params={"historyLength": "1", "history_length": "0"})
    assert r.status_code == 200 and len(r.json()["history"]) == 1  # historyLength wins
    r = await client.get(f"/v1/tasks/{tid}", params={"history_length": "0"})
    assert r.status_code == 200 and "history" not in r.json()


@pytest.mark.parametrize(
    "body", [{"query": "q", "topK": "5"}, {"query": "q", "topK": True}, {"query": "q", "topK": 5.5}]
)
async def test_search_top_k_is_an_integer(
    client: httpx.AsyncClient, send: Send, body: dict[str, Any]
) -> None:
    cid = (await send("x")).json()["task"]["contextId"]
    r = await client.post(f"/v1/contexts/{cid}:search", json=body)
    assert r.status_code == 400, r.text
    assert _errors(r) == {"topK"}


@pytest.mark.parametrize(
    ("media", "status"),
    [
        ("application/json", 200),
        ("application/json; charset=utf-8", 200),
        ("Application/JSON;charset=UTF-8", 200),
        ("application/a2a+json", 200),
        ("text/plain", 415),
        ("text/plain; charset=utf-8", 415),
        ("application/x-www-form-urlencoded", 415),
        ("multipart/form-data; boundary=x", 415),
        ("application/jsonp", 415),
        (None, 415),
    ],
)
async def test_json_bodies_need_a_json_content_type(
    client: httpx.AsyncClient, media: str | None, status: int
) -> None:
    headers = {} if media is None else {"Content-Type": media}
    body = orjson.dumps({"message": message("x")})
    r = await client.post("/v1/message:send", content=body, headers=headers)
    assert r.status_code == status, r.text
    if status == 415:
        assert r.json()["error"] == "ContentTypeNotSupportedError" and r.json()["code"] == -32005
        assert (await client.get("/v1/contexts")).json()["total"] == 0  # nothing stored
    agent = orjson.dumps({"id": "a1", "name": "A", "type": "echo"})
    r = await client.post("/agents", content=agent, headers=headers)
    assert r.status_code == (201 if status == 200 else 415), r.text


async def test_a_cancel_needs_no_body_and_no_content_type(
    client: httpx.AsyncClient, send: Send
) -> None:
    tid = (
        await send(
            "x", configuration={"blocking": False}, metadata={"echo": {"finalState": "working"}}
        )
    ).json()["task"]["id"]
    r = await client.post(
        f"/v1/tasks/{tid}:cancel", content=b"x=1", headers={"Content-Type": "text/plain"}
    )
    assert r.status_code == 415
    r = await client.post(f"/v1/tasks/{tid}:cancel")
    assert r.status_code == 200 and r.json()["status"]["state"] == "canceled"


async def test_the_gateways_own_bodies_refuse_unknown_fields(make_app: AppFactory) -> None:
    """A misspelt field is a 400 naming it, never ignored: ``{"grace": 2}`` on a rotation
    used to end the old key at once."""
    keys = orjson.dumps(API_KEYS).decode()
    async with make_app(api_keys=keys, api_key_secret="s" * 20) as c:
        admin = auth("admin")
        created = await c.post("/keys", json={"user": "ehr", "name": "ehr"}, headers=admin)
        assert created.status_code == 201, created.text
        old = created.json()
        rotated = await c.post(f"/keys/{old['id']}:rotate", json={"grace": 2}, headers=admin)
        assert rotated.status_code == 400
        assert rotated.json()["data"]["errors"][0]["field"] == "grace"
        still = await c.get("/v1/contexts", headers={"Authorization": f"Bearer {old['key']}"})
        assert still.status_code == 200
        for path, body in [
            ("/keys", {"user": "x", "role": "admin"}),
            ("/v1/contexts/c:search", {"query": "x", "k": 3}),
            ("/agents", {"name": "x", "type": "echo", "kind": "echo"}),
        ]:
            r = await c.post(path, json=body, headers=admin)
            assert r.status_code == 400, (path, r.text)
            assert r.json()["error"] == "InvalidParamsError", path


# --- 5. no input echoed --------------------------------------------------------------------


async def test_a_wrong_part_kind_is_not_echoed(send: Send) -> None:
    r = await send({"kind": "SECRET-KIND", "text": "x"})
    assert r.status_code == 400
    assert "SECRET" not in r.text
    assert _errors(r) == {"message.parts.0"}


async def test_invalid_memory_options_are_not_echoed(client: httpx.AsyncClient) -> None:
    for memory in ({"topK": "SECRET"}, {"memoryHeader": ["SECRET"]}, {"topK": 10**30}):
        spec = {"name": "n", "type": "echo", "config": {"memory": memory}}
        r = await client.post("/agents", json=spec)
        assert r.status_code == 400 and "SECRET" not in r.text and "10000" not in r.text
        assert r.json()["data"]["errors"][0]["reason"].endswith(next(iter(memory)))


async def test_keyed_clients_see_the_same_rules(keyed: httpx.AsyncClient) -> None:
    r = await keyed.post(
        "/v1/message:send", content=b"{}", headers={**auth("alice"), "Content-Type": "text/plain"}
    )
    assert r.status_code == 415
