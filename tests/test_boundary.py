"""The boundary: strict input, content types, hosts and origins, browser headers, and the
bounds a client meets on a connection before it is authenticated."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from starlette.types import Message, Receive, Scope
from starlette.types import Send as ASGISend

from gateway.errors import PayloadTooLargeError
from gateway.http.access_log import AccessLogMiddleware
from gateway.http.limits import BodyLimitMiddleware
from gateway.http.params import MAX_JSON_DEPTH
from gateway.http.server import _HeadWithBody
from tests.conftest import API_KEYS, AppFactory, Send, auth, message
from tests.processes import serving

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


# --- 5. hosts and origins, browser headers --------------------------------------------------

HOSTILE = ["attacker.example", "localhost.attacker.example", "127.0.0.1.nip.io", "10.0.0.1"]


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8000",
        "127.0.0.1",
        "127.0.0.1:1",
        "[::1]",
        "[::1]:8000",
        "LocalHost:9",
    ],
)
async def test_open_mode_answers_loopback_names(make_app: AppFactory, host: str) -> None:
    async with make_app(allowed_hosts=[]) as c:
        r = await c.get("/v1/contexts", headers={"Host": host})
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("host", [*HOSTILE, "gw"])
async def test_open_mode_refuses_other_host_names(make_app: AppFactory, host: str) -> None:
    async with make_app(allowed_hosts=[]) as c:
        for method, path in [
            ("GET", "/v1/contexts"),
            ("POST", "/v1/message:send"),
            ("DELETE", "/v1/contexts/c"),
            ("POST", "/agents"),
            ("POST", "/mcp"),
            ("GET", "/.well-known/agent-card.json"),
            ("GET", "/healthz"),
        ]:
            r = await c.request(
                method, path, headers={"Host": host}, json={"message": message("x")}
            )
            assert r.status_code == 421, (method, path, r.text)
            assert r.json()["error"] == "HostNotAllowedError" and host not in r.text
        assert (await c.get("/v1/contexts", headers={"Host": "localhost"})).json()["total"] == 0


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        ("http://localhost:5173", 200),
        ("http://127.0.0.1:8000", 200),
        ("https://[::1]", 200),
        ("http://attacker.example", 421),
        ("http://localhost.attacker.example", 421),
        ("null", 421),
        ("file://", 421),
        ("https://app.example", 200),  # a configured CORS origin
    ],
)
async def test_open_mode_refuses_pages_of_other_sites(
    make_app: AppFactory, origin: str, status: int
) -> None:
    async with make_app(cors_origins=["https://app.example"]) as c:
        r = await c.post(
            "/v1/message:send", json={"message": message("x")}, headers={"Origin": origin}
        )
        assert r.status_code == status, r.text


async def test_allowed_hosts_extend_open_mode(make_app: AppFactory) -> None:
    async with make_app(allowed_hosts=["gw", "gateway.internal:8443"]) as c:
        assert (
            await c.get("/v1/contexts", headers={"Host": "gateway.internal"})
        ).status_code == 200
        assert (
            await c.get("/v1/contexts", headers={"Host": "attacker.example"})
        ).status_code == 421


async def test_with_api_keys_any_host_is_answered_unless_hosts_are_named(
    make_app: AppFactory,
) -> None:
    keys = orjson.dumps(API_KEYS).decode()
    async with make_app(api_keys=keys, allowed_hosts=[]) as c:
        headers = {**auth("alice"), "Host": "gw.hospital.example", "Origin": "https://x.example"}
        assert (await c.get("/v1/contexts", headers=headers)).status_code == 200
    async with make_app(api_keys=keys, allowed_hosts=["gw.hospital.example"]) as c:
        ok = await c.get("/v1/contexts", headers={**auth("alice"), "Host": "gw.hospital.example"})
        assert ok.status_code == 200
        r = await c.get("/v1/contexts", headers={**auth("alice"), "Host": "attacker.example"})
        assert r.status_code == 421


MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize(
    ("host", "origin", "allowed"),
    [
        ("LOCALHOST", None, True),
        ("LocalHost:8000", "HTTP://LOCALHOST:3000", True),
        ("127.0.0.1:8000", "http://[::1]:5173", True),
        ("GW.example", None, True),  # a configured name, in another case
        ("Attacker.Example", None, False),
        ("localhost", "http://Attacker.Example", False),
    ],
)
async def test_every_surface_answers_the_same_hosts_and_origins(
    make_app: AppFactory, host: str, origin: str | None, allowed: bool
) -> None:
    """REST, JSON-RPC and MCP follow one host rule, case-insensitively, and refuse alike."""
    headers = {"Host": host, **({"Origin": origin} if origin else {})}
    async with make_app(allowed_hosts=["gw.example"]) as c:
        rest = await c.get("/v1/contexts", headers=headers)
        rpc = await c.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                                      "params": {"id": "t"}}, headers=headers)  # fmt: skip
        mcp = await c.post("/mcp", json=MCP_INIT, headers={**headers, **MCP_HEADERS})
        answers = [rest, rpc, mcp]
        if allowed:
            assert [r.status_code for r in answers] == [200, 200, 200], mcp.text
        else:
            assert {r.status_code for r in answers} == {421}
            assert rest.json() == rpc.json() == mcp.json()
            assert rest.json()["error"] == "HostNotAllowedError"


async def test_answers_are_not_cached_or_sniffed(keyed: httpx.AsyncClient, send: Send) -> None:
    h = auth("alice")
    answers = [
        await send("x", via=keyed, headers=h),
        await keyed.get("/v1/contexts", headers=h),
        await keyed.get("/v1/contexts"),  # 401
        await keyed.get("/v1/tasks/nope", headers=h),  # 404
        await keyed.get("/.well-known/agent-card.json"),
        await keyed.get("/healthz"),
        await keyed.post("/mcp", headers=h, content=b"{}"),  # 415
    ]
    for r in answers:
        assert r.headers["cache-control"] == "no-store", r.request.url
        assert r.headers["x-content-type-options"] == "nosniff"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


async def test_cors_is_off_unless_origins_are_configured(make_app: AppFactory) -> None:
    preflight = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
        "Host": "localhost",
    }
    async with make_app() as c:
        r = await c.options("/v1/message:send", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
    async with make_app(cors_origins=["https://app.example"]) as c:
        r = await c.options("/v1/message:send", headers=preflight)
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        other = await c.options(
            "/v1/message:send", headers={**preflight, "Origin": "https://x.example"}
        )
        assert other.headers.get("access-control-allow-origin") != "https://x.example"


# --- 5. nothing of the input echoed or logged -------------------------------------------

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _rpc(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}


async def test_mcp_answers_quote_no_input(
    client: httpx.AsyncClient, send: Send, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    cid = (await send("x")).json()["task"]["contextId"]
    unknown = await client.post(
        "/mcp",
        headers=MCP_HEADERS,
        json=_rpc("tools/call", {"name": "SECRET_TOOL", "arguments": {}}),
    )
    assert unknown.status_code == 200 and unknown.json()["error"]["code"] == -32602
    for arguments in (
        {"contextId": cid, "query": "x", "topK": "SECRET"},
        {"contextId": cid, "query": "x", "topK": "5"},
        {"contextId": ["SECRET"], "query": "x"},
    ):
        r = await client.post(
            "/mcp",
            headers=MCP_HEADERS,
            json=_rpc("tools/call", {"name": "search_memory", "arguments": arguments}),
        )
        result = r.json()["result"]
        assert result["isError"] and "SECRET" not in r.text and "input" not in r.text, r.text
    bad = await client.post("/mcp", headers=MCP_HEADERS, json={"SECRET": 1})
    assert bad.status_code == 400 and "SECRET" not in bad.text
    assert bad.json()["error"]["code"] == -32600
    assert "SECRET" not in caplog.text


async def test_mcp_is_post_only(client: httpx.AsyncClient) -> None:
    for method in ("GET", "DELETE", "PUT"):
        r = await client.request(method, "/mcp", headers=MCP_HEADERS)
        assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = await client.post(
        "/mcp", headers={**MCP_HEADERS, "Content-Type": "text/plain"}, content=b"{}"
    )
    assert r.status_code == 415 and r.json()["error"] == "ContentTypeNotSupportedError"


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("req-42.a_B", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("two words", False),
        ("a/b", False),
        ("é", False),
        ("", False),
    ],
)
async def test_request_ids_are_bounded_and_plain(
    make_app: AppFactory, caplog: pytest.LogCaptureFixture, sent: str, kept: bool
) -> None:
    caplog.set_level("INFO", logger="gateway.access")
    async with make_app(log_requests=True) as c:
        r = await c.get("/healthz", headers=[(b"X-Request-Id", sent.encode())])
    got = r.headers["x-request-id"]
    assert (got == sent) is kept
    assert len(got) <= 64 and got.replace("-", "").replace("_", "").replace(".", "").isalnum()
    (record,) = [rec for rec in caplog.records if rec.name == "gateway.access"]
    assert record.request_id == got  # type: ignore[attr-defined]


async def test_a_chunked_body_is_counted_whatever_length_it_claims() -> None:
    # A server that let both through would decode the chunks and ignore the length: the
    # limit trusts a Content-Length only without a Transfer-Encoding beside it.
    sent: list[Message] = []
    read = 0

    async def app(scope: Scope, receive: Receive, send: ASGISend) -> None:
        nonlocal read
        while True:
            message = await receive()
            read += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    chunks = iter([b"x" * 1000] * 5)

    async def receive() -> Message:
        return {"type": "http.request", "body": next(chunks), "more_body": True}

    headers = [(b"content-length", b"10"), (b"transfer-encoding", b"chunked")]
    scope, send = _asgi_call("POST", "/v1/message:send", headers, sent)
    with pytest.raises(PayloadTooLargeError):
        await BodyLimitMiddleware(app, max_bytes=2048)(scope, receive, send)
    assert read <= 2048 and sent == []


def _asgi_call(
    method: str, path: str, headers: list[tuple[bytes, bytes]], sent: list[Message]
) -> tuple[Scope, ASGISend]:
    """An HTTP scope, and a ``send`` that keeps what it is sent in ``sent``."""

    async def send(message: Message) -> None:
        sent.append(message)

    return {"type": "http", "method": method, "path": path, "headers": headers}, send


async def test_a_request_id_ending_in_a_line_break_is_replaced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # HTTP/1.1 parsers refuse a line break in a header; other servers may pass one on.
    caplog.set_level("INFO", logger="gateway.access")
    sent: list[Message] = []

    async def app(scope: Scope, receive: Receive, send: ASGISend) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    scope, send = _asgi_call("GET", "/", [(b"x-request-id", b"forged\n")], sent)
    await AccessLogMiddleware(app)(scope, receive, send)
    got = dict(sent[0]["headers"])[b"x-request-id"]
    assert b"\n" not in got and b"forged" not in got
    assert "forged" not in caplog.text


# --- 5. what a connection may hold (a real `gateway serve`, raw sockets) -----------------

# Short bounds for the test; the defaults (README) are 16 KiB, 10 s and 30 s.
HEADER_SECONDS, BODY_SECONDS = 1.0, 2.0
# How long the test waits for the server to act on a bound: generous on a busy machine,
# and still far below what an unbounded server would allow (forever).
PATIENCE = 30.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway with API keys and its own embedded Redis (other tests flush theirs)."""
    with serving(
        tmp_path_factory.mktemp("boundary"),
        GATEWAY_API_KEYS=orjson.dumps(API_KEYS).decode(),
        GATEWAY_HEADER_TIMEOUT_SECONDS=str(HEADER_SECONDS),
        GATEWAY_BODY_TIMEOUT_SECONDS=str(BODY_SECONDS),
    ) as (_, base):
        yield base


@contextmanager
def connection(base: str) -> Iterator[socket.socket]:
    host, port = urlsplit(base).hostname, urlsplit(base).port
    with socket.create_connection((host, port), timeout=PATIENCE) as sock:
        try:
            yield sock
        finally:
            _AHEAD.pop(sock.fileno(), None)


def answer_and_close(sock: socket.socket, trickle: bytes = b"") -> bytes:
    """Everything the server sends until it closes the connection, sending ``trickle`` a
    byte at a time meanwhile (each byte once the server has been silent for 0.2 s)."""
    received, deadline = b"", time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return received
            if not chunk:
                return received
            received += chunk
        elif trickle:
            with suppress(OSError):  # closed by the server: the next read says so
                sock.sendall(trickle[:1])
            trickle = trickle[1:]
    raise AssertionError(f"the connection stayed open for {PATIENCE} s: {received[:200]!r}")


# What a read took past the response it was for: the start of the next, per connection.
_AHEAD: dict[int, bytes] = {}


def response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One whole response on a kept-alive connection: its head (lowercased) and body."""
    data = _AHEAD.pop(sock.fileno(), b"")
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    head = head.lower()
    length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    if body[length:]:
        _AHEAD[sock.fileno()] = body[length:]
    return head, body[:length]


def request(path: str, *headers: str, method: str = "GET", length: int | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.mark.timeout(240)
def test_headers_are_bounded_in_size(served: str) -> None:
    with connection(served) as sock:
        sock.sendall(request("/healthz", "X-Fill: " + "a" * 8000))
        head, _ = response(sock)
        assert head.startswith(b"http/1.1 200"), head
        big = request("/healthz", "X-Fill: " + "a" * 100_000)
        for at in range(0, len(big), 4096):  # stop sending once the server has answered
            if select.select([sock], [], [], 0)[0]:
                break
            try:
                sock.sendall(big[at : at + 4096])
            except OSError:
                break
        answer = answer_and_close(sock)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert b"HeadersTooLargeError" in answer or answer == b""


@pytest.mark.timeout(240)
def test_a_huge_header_sent_at_once_is_refused(served: str) -> None:
    with connection(served) as sock:
        sock.sendall(request("/healthz", *(f"X-F{n}: {'a' * 1000}" for n in range(40))))
        answer = answer_and_close(sock)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]


@pytest.mark.timeout(240)
def test_headers_that_never_end_are_cut_off(served: str) -> None:
    started = time.monotonic()
    with connection(served) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = answer_and_close(sock)
    assert answer.startswith(b"HTTP/1.1 408") and b"RequestTimeoutError" in answer, answer
    # not sooner than the bound (asyncio's timers may fire a clock tick early)
    assert time.monotonic() - started >= HEADER_SECONDS - 0.01
    with connection(served) as sock:  # trickled, a byte at a time: the bound is a deadline
        answer = answer_and_close(
            sock, trickle=b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 10_000
        )
    assert answer.startswith(b"HTTP/1.1 408"), answer
    with connection(served) as sock:  # never a byte: closed without a word
        assert answer_and_close(sock) == b""


@pytest.mark.timeout(240)
def test_a_slow_body_is_cut_off(served: str) -> None:
    key = "Authorization: Bearer key-alice"
    send = request(
        "/v1/message:send", key, "Content-Type: application/json", method="POST", length=500
    )
    with connection(served) as sock:
        sock.sendall(send + b'{"message": ')
        answer = answer_and_close(sock, trickle=b" " * 400)
    assert answer.startswith(b"HTTP/1.1 408") and b"RequestTimeoutError" in answer, answer
    # Unauthenticated: answered at once, and the rest of the body is not waited for either.
    anonymous = request(
        "/v1/message:send", "Content-Type: application/json", method="POST", length=500
    )
    with connection(served) as sock:
        sock.sendall(anonymous + b"{")
        answer = answer_and_close(sock, trickle=b" " * 400)
    assert answer.startswith(b"HTTP/1.1 401"), answer


class _Recorder:
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


async def test_a_response_head_goes_out_with_its_body_or_by_the_end_of_the_loops_turn() -> None:
    loop = asyncio.get_running_loop()
    whole = _Recorder()
    transport = _HeadWithBody(whole, loop)  # type: ignore[arg-type]
    for data in (b"head", b"body", b"more"):
        transport.write(data)
    assert whole.writes == [b"headbody", b"more"]  # one write for the head and the body

    streamed = _Recorder()
    transport = _HeadWithBody(streamed, loop)  # type: ignore[arg-type]
    transport.write(b"head")
    assert streamed.writes == []
    await asyncio.sleep(0)  # the end of this turn of the loop
    assert streamed.writes == [b"head"]  # a stream's head does not wait for its first event
    transport.write(b"event")
    assert streamed.writes == [b"head", b"event"]

    closed = _Recorder()
    transport = _HeadWithBody(closed, loop)  # type: ignore[arg-type]
    transport.write(b"head")
    transport.close()
    assert closed.writes == [b"head"] and closed.closed


@pytest.mark.timeout(240)
def test_bytes_past_the_declared_length_are_not_the_body(served: str) -> None:
    # The body limit trusts a Content-Length within it: the server hands the app no more
    # than the length declared, and what follows is read as the next request.
    body = orjson.dumps(
        {"message": {"role": "user", "parts": [{"text": "x"}], "messageId": "past-length"}}
    )
    key = "Authorization: Bearer key-carol"  # no other test here is hers
    send = request(
        "/v1/message:send", key, "Content-Type: application/json", method="POST", length=len(body)
    )
    with connection(served) as sock:
        sock.sendall(send + body + request("/v1/contexts", key))
        head, answer = response(sock)
        assert head.startswith(b"http/1.1 200"), head
        assert orjson.loads(answer)["task"]["status"]["state"] == "completed"
        head, answer = response(sock)
        assert head.startswith(b"http/1.1 200"), head
        assert len(orjson.loads(answer)["items"]) == 1


@pytest.mark.timeout(240)
def test_the_server_keeps_serving_and_names_no_software(served: str) -> None:
    with connection(served) as sock:
        for _ in range(2):  # keep-alive still works within the bounds
            sock.sendall(request("/v1/contexts", "Authorization: Bearer key-alice"))
            head, body = response(sock)
            assert head.startswith(b"http/1.1 200"), head
            assert orjson.loads(body)["items"] == []
            assert b"\r\nserver:" not in head
            assert b"cache-control: no-store" in head and b"x-content-type-options: nosniff" in head
