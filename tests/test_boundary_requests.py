"""The boundary's requests: the hosts and origins each surface answers, browser headers,
and nothing of the input echoed or logged (MCP answers, request ids, chunked bodies)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from starlette.types import Message, Receive, Scope
from starlette.types import Send as ASGISend

from gateway.errors import PayloadTooLargeError
from gateway.http.access_log import AccessLogMiddleware
from gateway.http.limits import BodyLimitMiddleware
from tests.conftest import API_KEYS, AppFactory, Send, auth, message

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
