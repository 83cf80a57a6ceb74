"""Malformed input gets a clear 4xx with the protocol's error body, never a 500."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Match, Route

from gateway.embedded_redis import EmbeddedRedis
from tests.conftest import AppFactory

JSON = {"Content-Type": "application/json"}

BAD_BODIES: list[tuple[bytes, str]] = [
    (b"", "JSONParseError"),
    (b"{not json", "JSONParseError"),
    (b"[]", "InvalidParamsError"),
    (b'"text"', "InvalidParamsError"),
    (b"{}", "InvalidParamsError"),
    (b'{"message": null}', "InvalidParamsError"),
    (b'{"message": {"role": "user", "parts": [], "messageId": "1"}}', "InvalidParamsError"),
    (
        b'{"message": {"role": "user", "parts": [{"kind": "text"}], "messageId": "1"}}',
        "InvalidParamsError",
    ),
    (
        b'{"message": {"role": "user", "parts": [{"kind": "x"}], "messageId": "1"}}',
        "InvalidParamsError",
    ),
    (
        b'{"message": {"role": "user", "parts": [{"kind": "data", "data": [1]}], "messageId": "1"}}',
        "InvalidParamsError",
    ),
    (
        b'{"message": {"role": "user", "parts": [{"kind": "text", "text": "SECRET"}], "messageId": ""}}',
        "InvalidParamsError",
    ),
    (
        b'{"message": {"role": "user", "parts": [{"kind": "text", "text": "SECRET"}]}}',
        "InvalidParamsError",
    ),
    (
        b'{"message": {"role": 5, "parts": [{"kind": "text", "text": "SECRET"}], "messageId": "1"}}',
        "InvalidParamsError",
    ),
    (b'{"message": {"role": "user", "parts": "SECRET", "messageId": "1"}}', "InvalidParamsError"),
    (
        b'{"message": {"role": "user", "parts": [{"text": "x"}], "messageId": "1"}, "configuration": {"blocking": "SECRET"}}',
        "InvalidParamsError",
    ),
    (
        b'{"message": {"role": "user", "parts": [{"text": "x"}], "messageId": "1", "contextId": 7}}',
        "InvalidParamsError",
    ),
    (
        b'{"message": {"role": "user", "parts": [{"text": "x"}], "messageId": "1", "referenceTaskIds": "a"}}',
        "InvalidParamsError",
    ),
    (b"\xff\xfe", "JSONParseError"),
]


@pytest.mark.parametrize(("raw", "error"), BAD_BODIES)
async def test_bad_send_bodies(client: httpx.AsyncClient, raw: bytes, error: str) -> None:
    r = await client.post("/v1/message:send", content=raw, headers=JSON)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error"] == error
    assert body["code"] in (-32700, -32602)
    assert "SECRET" not in r.text and "Traceback" not in r.text


async def test_validation_errors_name_the_fields(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/message:send", json={"message": {"role": "user", "parts": []}})
    fields = {e["field"] for e in r.json()["data"]["errors"]}
    assert fields == {"message.parts", "message.messageId"}


async def test_unknown_route_and_method(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/nothing")
    assert r.status_code == 404 and r.json()["error"] == "MethodNotFoundError"
    r = await client.get("/v1/message:send")
    assert r.status_code == 405 and r.json()["error"] == "MethodNotFoundError"
    assert r.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/contexts/c", "DELETE, GET, HEAD"),
        ("POST", "/agents/echo/v1/contexts/c", "DELETE, GET, HEAD"),
        ("PUT", "/agents", "GET, HEAD, POST"),
        ("PUT", "/agents/x", "DELETE, GET, HEAD, PATCH, POST"),  # POST: JSON-RPC
        ("DELETE", "/healthz", "GET, HEAD"),
        ("TRACE", "/openapi.yaml", "GET, HEAD"),
        ("GET", "/v1/tasks/t:cancel", "POST"),  # not the task "t:cancel"
        ("DELETE", "/agents/echo/v1/contexts/c:search", "POST"),
        ("GET", "/mcp", "POST"),
    ],
)
async def test_405_names_every_allowed_method(
    client: httpx.AsyncClient, method: str, path: str, allow: str
) -> None:
    r = await client.request(method, path)
    assert r.status_code == 405
    assert r.headers["allow"] == allow
    assert r.json()["error"] == "MethodNotFoundError"


async def test_body_over_limit_is_413(make_app: AppFactory) -> None:
    async with make_app(max_body_bytes=2048) as c:
        big = {"message": {"role": "user", "parts": [{"text": "x" * 4000}], "messageId": "1"}}
        r = await c.post("/v1/message:send", json=big)
        assert r.status_code == 413
        assert r.json()["error"] == "PayloadTooLargeError"

        async def chunks() -> AsyncIterator[bytes]:
            for _ in range(4):
                yield b"x" * 1000

        r = await c.post("/v1/message:send", content=chunks(), headers=JSON)
        assert r.status_code == 413


@pytest.mark.timeout(150)  # four phases of at most 30 s
async def test_redis_down_is_503_with_retry_after(make_app: AppFactory, tmp_path: Path) -> None:
    from tests.waiting import until

    server = EmbeddedRedis(tmp_path / "r")
    server.start()
    body = {"message": {"role": "user", "parts": [{"text": "x"}], "messageId": "1"}}

    def numbered(n: str) -> dict[str, Any]:
        return {"message": {**body["message"], "messageId": n}}

    # A stopped Redis refuses connections at once, so the default timeout costs nothing
    # here; a shorter one made a merely slow Redis (a busy machine) look down. The short
    # lease: a run whose write was lost that way is taken up again in seconds, as after
    # any worker's lease, not after the default 30 s.
    try:
        async with make_app(redis_url=server.url, job_lease_seconds=2.0) as c:
            async with asyncio.timeout(30):
                assert (await c.post("/v1/message:send", json=body)).status_code == 200
            server.stop()
            async with asyncio.timeout(30):
                r = await c.post("/v1/message:send", json=numbered("2"))
                assert r.status_code == 503
                assert r.headers["retry-after"] == "1"
                assert r.json()["error"] == "InternalError" and r.json()["code"] == -32603
                assert (await c.get("/v1/contexts")).status_code == 503
                readiness = await c.get("/readyz")
                assert readiness.status_code == 503
                assert readiness.json()["checks"]["redis"] == "unreachable"
                assert (await c.get("/healthz")).status_code == 200
            server.start()

            async def ready() -> bool:
                return (await c.get("/readyz")).status_code == 200

            async def sent() -> httpx.Response | None:
                # as a client honouring Retry-After: the same message again (idempotent)
                r = await c.post("/v1/message:send", json=numbered("3"))
                return None if r.status_code == 503 else r

            await until(ready, timeout=30, what="readiness once Redis is back", every=0.2)
            ok = await until(sent, timeout=30, what="a send once Redis is back", every=1.0)
            assert ok.status_code == 200
            assert ok.json()["task"]["status"]["state"] == "completed"
    finally:
        server.stop()


def test_the_router_picks_the_route_a_full_scan_would(client: httpx.AsyncClient) -> None:
    """The router looks routes up by a path's first segment: for a concrete path of every
    route and method, it serves the route Starlette's scan of the whole list would."""
    app = client.app  # type: ignore[attr-defined]
    for route in app.routes:
        if not isinstance(route, Route):
            continue
        path = re.sub(r"{[^}]+}", "p1", route.path)
        for method in route.methods or ("POST",):
            scope = {"type": "http", "method": method, "path": path, "root_path": ""}
            scanned = next(r for r in app.routes if r.matches(scope)[0] is Match.FULL)
            indexed = [r for r in app.router.candidates(path) if r.matches(scope)[0] is Match.FULL]
            assert indexed[:1] == [scanned], (method, path)


def test_the_error_tree_in_errors_docstring_names_every_error() -> None:
    """The docstring of gateway/errors.py is where a reader finds every error, its HTTP
    status and its A2A code."""
    from gateway import errors

    tree = errors.__doc__ or ""
    for name in errors.__all__:
        error = getattr(errors, name)
        if error is errors.GatewayError or not issubclass(error, errors.GatewayError):
            continue
        parent = error.__mro__[1]
        if (error.status, error.code) == (parent.status, parent.code):  # shares its parent's
            assert re.search(rf"\b{name}\b", tree), name
            continue
        assert re.search(rf"\b{name}\s+\({error.status}, {error.code}\b", tree), name
