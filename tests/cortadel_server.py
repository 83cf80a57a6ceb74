"""A Cortadel stand-in for tests, on 127.0.0.1.

Every request body is validated against the request schema of its route in
``tests/contracts/cortadel-openapi.json`` (a copy of Cortadel's published contract);
a violation answers 400 ValidationProblemDetails and is recorded in ``errors``, which
tests assert empty; so is a query parameter the route does not declare, a required one
missing, or an integer one that is not. Memories are kept per user id; the list API pages
them (``size`` at most 100) and shows superseded versions only when asked. ``from-conversation`` stores each
message's content as one fact and is idempotent on ``(user_id, uuid)`` and on
identical content (``SKIP_DUPLICATE`` with the existing id), as the real server is.

``unreported``: texts the next ``from-conversation`` also stores in its session without
naming them in its answer (as a server whose pipeline derives more than it reports).

Faults: ``fail_next`` statuses to answer first, ``down`` (503 everywhere), ``delay``
seconds per call, ``pin_key_to`` (the key is bound to one user: the body's user_id is
rewritten to it and another user_id in the query is refused with 403).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.http_double import ServedDouble

SPEC = json.loads((Path(__file__).parent / "contracts" / "cortadel-openapi.json").read_text())


def _nullable(schema: Any) -> Any:
    """OpenAPI 3.0 ``nullable`` as JSON Schema types."""
    if isinstance(schema, dict):
        out = {k: _nullable(v) for k, v in schema.items() if k != "nullable"}
        if schema.get("nullable") and "type" in schema:
            out["type"] = [schema["type"], "null"]
        return out
    if isinstance(schema, list):
        return [_nullable(s) for s in schema]
    return schema


_COMPONENTS = _nullable(SPEC["components"])


def _validator(path: str, method: str) -> jsonschema.Draft202012Validator:
    body = SPEC["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema.Draft202012Validator({**body, "components": _COMPONENTS})


_BODIES = {
    ("/api/v1/memories/search", "post"): _validator("/api/v1/memories/search", "post"),
    ("/api/v1/memories/from-conversation", "post"): _validator(
        "/api/v1/memories/from-conversation", "post"
    ),
    ("/api/v1/memories", "post"): _validator("/api/v1/memories", "post"),
    ("/api/v1/memories", "delete"): _validator("/api/v1/memories", "delete"),
}


def _query_problems(path: str, method: str, query: dict[str, str]) -> list[str]:
    """What is wrong with a request's query, by the route's declared parameters."""
    declared = {
        p["name"]: p
        for p in SPEC["paths"][path][method].get("parameters", ())
        if p["in"] == "query"
    }
    problems = [f"undeclared query parameter {name}" for name in query if name not in declared]
    for name, p in declared.items():
        if p.get("required") and name not in query:
            problems.append(f"missing query parameter {name}")
        integer = p["schema"].get("type") == "integer"
        if integer and name in query and not query[name].lstrip("-").isdigit():
            problems.append(f"query parameter {name} is not an integer")
    return problems


_QUERIES = {("/api/v1/memories", "get"), ("/api/v1/memories/{memoryId}", "get")}


def _problems(route: tuple[str, str], query: dict[str, str], body: Any) -> list[str]:
    """What is wrong with a request, by its route's contract (query and body)."""
    path, method = route
    if method == "get" and path.startswith("/api/v1/memories/"):
        path = "/api/v1/memories/{memoryId}"
    problems = _query_problems(path, method, query) if (path, method) in _QUERIES else []
    validator = _BODIES.get(route)
    if validator is not None:
        problems += [e.message for e in validator.iter_errors(body)]
    return problems


@dataclass
class Memory:
    id: str
    user_id: str
    text: str
    gist: str | None = None
    score: float | None = None  # rrf_score to report; None: omitted
    session_id: str | None = None
    memory_type: str = "semantic"
    uuid: str | None = None
    tags: list[str] = field(default_factory=list)
    project: str | None = None
    agent: bool = False
    superseded: bool = False  # an older version (listed only with include_superseded)
    created_at: int = 0


class CortadelServer(ServedDouble):
    def __init__(self, api_key: str | None = "cortadel-key") -> None:
        self.api_key = api_key
        super().__init__()
        self.memories: dict[str, Memory] = {}
        self.calls: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.fail_next: list[int] = []
        self.down = False
        self.delay = 0.0
        self.pin_key_to: str | None = None
        self.unreported: list[str] = []
        self._ids = itertools.count(1)
        routes = [
            Route("/api/health", self._health, methods=["GET"]),
            Route("/api/v1/memories/search", self._search, methods=["POST"]),
            Route("/api/v1/memories/from-conversation", self._conversation, methods=["POST"]),
            Route("/api/v1/memories", self._memories, methods=["GET", "POST", "DELETE"]),
            Route("/api/v1/memories/{memory_id}", self._get, methods=["GET"]),
        ]
        self.serve(Starlette(routes=routes))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- test helpers ---------------------------------------------------------------------

    def seed(self, user_id: str, text: str, **fields: Any) -> str:
        memory = Memory(f"m{next(self._ids)}", user_id, text, **fields)
        self.memories[memory.id] = memory
        return memory.id

    def calls_to(self, path: str) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["path"] == path]

    def of_user(self, user_id: str) -> list[Memory]:
        return [m for m in self.memories.values() if m.user_id == user_id]

    # -- plumbing -------------------------------------------------------------------------

    async def _enter(self, request: Request) -> tuple[Any, Response | None]:
        """Record the call, apply faults and auth, validate the body."""
        raw = await request.body()
        body = json.loads(raw) if raw else None
        route = (request.url.path, request.method.lower())
        self.calls.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": dict(request.query_params),
                "body": body,
                "auth": request.headers.get("authorization"),
            }
        )
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.down:
            return body, JSONResponse({"status": 503}, 503)
        if self.fail_next:
            status = self.fail_next.pop(0)
            return body, JSONResponse({"status": status}, status)
        if self.api_key and request.headers.get("authorization") != f"Bearer {self.api_key}":
            return body, JSONResponse({"code": "unauthorized", "status": 401}, 401)
        problems = _problems(route, dict(request.query_params), body)
        if problems:
            self.errors.extend(problems)
            return body, JSONResponse(
                {"title": "validation", "status": 400, "errors": {"body": problems}}, 400
            )
        if self.pin_key_to is not None:
            query_user = request.query_params.get("user_id")
            if query_user is not None and query_user != self.pin_key_to:
                return body, JSONResponse({"code": "forbidden", "status": 403}, 403)
            if isinstance(body, dict) and "user_id" in body:
                body["user_id"] = self.pin_key_to
        return body, None

    async def _health(self, request: Request) -> Response:
        self.calls.append({"method": "GET", "path": request.url.path, "query": {}, "body": None})
        status = "degraded" if self.down else "ok"
        return JSONResponse({"status": status}, 503 if self.down else 200)

    # -- routes ---------------------------------------------------------------------------

    async def _search(self, request: Request) -> Response:
        body, refused = await self._enter(request)
        if refused:
            return refused
        words = set(body["query"].lower().split())
        found = []
        for m in self.of_user(body["user_id"]):
            if m.superseded:
                continue
            if body.get("session_id") and m.session_id != body["session_id"]:
                continue
            if body.get("memory_type") and m.memory_type != body["memory_type"]:
                continue
            overlap = len(words & set(m.text.lower().split()))
            found.append((overlap, m))
        found.sort(key=lambda pair: -pair[0])
        results = []
        for _, m in found[: body.get("top_k", 10)]:
            hit: dict[str, Any] = {
                "id": m.id,
                "content": m.text,
                "gist": m.gist,
                "memory_type": m.memory_type,
                "tags": m.tags,
                "attributes": {"session_id": m.session_id},
            }
            if m.score is not None:
                hit["rrf_score"] = m.score
            results.append(hit)
        return JSONResponse({"query": body["query"], "results": results, "total": len(results)})

    async def _conversation(self, request: Request) -> Response:
        body, refused = await self._enter(request)
        if refused:
            return refused
        user = body["user_id"]
        results = []
        for message in body["messages"]:
            existing = next(
                (
                    m
                    for m in self.of_user(user)
                    if (message.get("uuid") and m.uuid == message.get("uuid"))
                    or m.text == message["content"]
                ),
                None,
            )
            if existing is not None:
                results.append(
                    {"id": existing.id, "memory": existing.text, "event": "SKIP_DUPLICATE"}
                )
                continue
            memory_id = self.seed(
                user,
                message["content"],
                session_id=body.get("session_id"),
                uuid=message.get("uuid"),
                tags=body.get("tags") or [],
                project=body.get("project"),
                agent=bool(body.get("is_agent_memory")),
            )
            results.append({"id": memory_id, "memory": message["content"], "event": "ADD"})
        for text in self.unreported:
            self.seed(user, text, session_id=body.get("session_id"))
        self.unreported = []
        return JSONResponse({"results": results})

    async def _memories(self, request: Request) -> Response:
        body, refused = await self._enter(request)
        if refused:
            return refused
        if request.method == "POST":
            memory_id = self.seed(body["user_id"], body["text"])
            return JSONResponse({"id": memory_id, "content": body["text"], "state": "active"})
        if request.method == "DELETE":
            gone = [
                i
                for i in body["memory_ids"]
                if self.memories.get(i, None) is not None
                and self.memories[i].user_id == body["user_id"]
            ]
            for i in gone:
                del self.memories[i]
            return JSONResponse({"message": f"Deleted {len(gone)} memories"})
        query = request.query_params
        page, size = int(query.get("page", "1")), int(query.get("size", "10"))
        if page < 1 or not 1 <= size <= 100:
            return JSONResponse({"title": "validation", "status": 400}, 400)
        wanted = [
            m
            for m in reversed(self.of_user(query["user_id"]))
            if query.get("include_superseded") == "true" or not m.superseded
        ]
        items = [
            {
                "id": m.id,
                "content": m.text,
                "created_at": m.created_at,
                "state": "active",
                "is_current": not m.superseded,
                "invalid_at": "2026-01-01T00:00:00Z" if m.superseded else None,
                "memory_type": m.memory_type,
            }
            for m in wanted[(page - 1) * size : page * size]
        ]
        pages = -(-len(wanted) // size)
        return JSONResponse(
            {"items": items, "total": len(wanted), "page": page, "size": size, "pages": pages}
        )

    async def _get(self, request: Request) -> Response:
        _, refused = await self._enter(request)
        if refused:
            return refused
        memory = self.memories.get(request.path_params["memory_id"])
        if memory is None or memory.user_id != request.query_params.get("user_id"):
            return JSONResponse({"code": "not_found", "status": 404}, 404)
        return JSONResponse(
            {"id": memory.id, "text": memory.text, "created_at": 0, "state": "active"}
        )
