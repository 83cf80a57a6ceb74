"""``/v1/memories``: a principal's long-term memories about a subject, listed or erased
(``?subject=``; without it, those without a subject; ``?user=`` for a tenant admin acting
for a user). The erasure's audit entry holds its receipt (counts), never content."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.clock import iso_from_ms
from gateway.http.audit import note_ids, note_receipt
from gateway.http.params import query_text
from gateway.http.responses import JSONResponse
from gateway.http.state import AppState
from gateway.principal import Principal
from gateway.service.messages import MAX_SUBJECT

__all__ = ["memory_routes"]


def _args(request: Request) -> tuple[AppState, Principal, str | None, str | None]:
    state: AppState = request.app.state.gateway
    principal: Principal = request.scope["state"]["principal"]
    subject = query_text(request, "subject", max_length=MAX_SUBJECT)
    user = query_text(request, "user")
    if user is not None and user != principal.user:
        note_ids(request.scope, for_user=user)
    return state, principal, subject, user


async def list_memories(request: Request) -> Response:
    state, principal, subject, user = _args(request)
    found = await state.memories.list(principal, subject, user)
    items = [
        {
            "id": m.id,
            "text": m.text,
            "createdAt": iso_from_ms(m.created_s * 1000),
            "current": m.current,
        }
        for m in found
    ]
    return JSONResponse({"items": items, "total": len(items)})


async def erase_memories(request: Request) -> Response:
    state, principal, subject, user = _args(request)
    receipt = {"memories": await state.memories.erase(principal, subject, user)}
    note_receipt(request.scope, receipt)
    return JSONResponse({"removed": receipt})


def memory_routes() -> list[BaseRoute]:
    return [
        Route("/v1/memories", list_memories, methods=["GET"]),
        Route("/v1/memories", erase_memories, methods=["DELETE"]),
    ]
