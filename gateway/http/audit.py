"""The audit trail at the HTTP edge: one entry per authenticated request, and one per
attempt refused for its credentials (401, or 403/429 at authentication).

The operation is the matched route's name (``send_message``, ``delete_context``, ...), or
the JSON-RPC methods a call named (``jsonrpc:message/send``; a batch's joined by commas);
the ids are the route's path parameters plus those a route notes (``note_ids``: a send's
new task and context, the context of a task read or canceled). Path parameters are kept as
they are when the request succeeded (they named something that exists), as digests
otherwise; so is a request id the client chose (``audit.entry.hashed_id``). Public paths
and anonymous card reads are not recorded.

A response's end waits for its entry (``AuditLog.commit``, a group commit): a whole
response is held until its entry is written, a streamed one's last chunk is; so every
request the gateway reported done is in the trail, whatever crashes after. An entry that
cannot be written (Redis unreachable, replicas behind) turns a held success into that
error, a 503 with Retry-After (the work may be done: a retry with the same ids finds it);
an error answer goes out as it is. The entry is retried in the background. A request
that ends without an answer is recorded without waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.audit.entry import AuditEntry, hashed_id
from gateway.audit.log import AuditLog
from gateway.clock import now_ms
from gateway.errors import GatewayError
from gateway.http.access_log import matched_route
from gateway.http.operations import noted
from gateway.http.response_start import status_of
from gateway.http.responses import error_response

__all__ = ["AuditMiddleware", "audit_request_id", "note_ids", "note_receipt", "on_unaudited"]

_PATH_IDS = {"task_id": "task", "context_id": "context", "agent_id": "agent", "key_id": "key"}
_DENIED = frozenset({401, 403, 429})


def note_ids(scope: Scope, **ids: str) -> None:
    """Ids a route learned (a send's task and context) for its audit entry."""
    scope.setdefault("state", {}).setdefault("audit_ids", {}).update(ids)


def on_unaudited(scope: Scope, respond: Callable[[GatewayError], Response]) -> None:
    """How the request's binding answers a success whose audit entry could not be written
    (its own error spelling; by default the REST error body)."""
    scope.setdefault("state", {})["audit_unwritten"] = respond


def note_receipt(scope: Scope, counts: dict[str, int]) -> None:
    """What a scrub removed, for its audit entry."""
    scope.setdefault("state", {})["audit_receipt"] = counts


def audit_request_id(scope: Scope) -> str:
    """The request's id as the audit trail records it (a client's own: its digest)."""
    state: dict[str, Any] = scope.get("state", {})
    request_id: str = state.get("request_id", "")
    return hashed_id(request_id) if request_id and state.get("request_id_given") else request_id


def _entry(scope: Scope, status: int) -> AuditEntry | None:
    state: dict[str, Any] = scope.get("state", {})
    principal = state.get("principal") or state.get("caller")
    if principal is None and status not in _DENIED:
        return None
    route = matched_route(scope)
    params = scope.get("path_params")
    if params is None and route is not None:  # refused before routing: the ids it named
        params = route.matches(scope)[1].get("path_params", {})
    exists = status < 400
    ids = {
        _PATH_IDS[k]: str(v) if exists else hashed_id(str(v))
        for k, v in (params or {}).items()
        if k in _PATH_IDS
    }
    ids.update(state.get("audit_ids", {}))
    client = scope.get("client")
    return AuditEntry(
        time_ms=now_ms(),
        tenant=principal.tenant if principal else None,
        user=principal.user if principal else "",
        credential=principal.credential if principal else "",
        operation=",".join(o.label for o in noted(scope))
        or getattr(route, "name", None)
        or "unmatched",
        method=scope["method"],
        status=status,
        request_id=audit_request_id(scope),
        client=client[0] if client else "",
        ids=ids,
        receipt=state.get("audit_receipt", {}),
    )


class AuditMiddleware:
    def __init__(self, app: ASGIApp, audit: AuditLog | None) -> None:
        self.app, self.audit = app, audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.audit is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        audit, held, recorded = self.audit, None, False

        async def send_audited(message: Message) -> None:
            nonlocal held, recorded
            if message["type"] == "http.response.start":
                held = message
                return
            if message["type"] == "http.response.body" and not message.get("more_body"):
                recorded = True
                status = held["status"] if held is not None else status_of(scope)
                entry = _entry(scope, status)
                failure = await audit.commit(entry) if entry is not None else None
                if failure is not None and held is not None and held["status"] < 400:
                    respond = scope["state"].get("audit_unwritten", error_response)
                    await respond(failure)(scope, receive, send)  # not reported done
                    return
            if held is not None:
                await send(held)
                held = None
            await send(message)

        try:
            await self.app(scope, receive, send_audited)
        finally:
            if not recorded:
                entry = _entry(scope, status_of(scope, held["status"] if held else 500))
                if entry is not None:
                    audit.record(entry)
