"""Routes of the REST binding, built per agent base by small factories."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.agents.base import Agent
from gateway.agents.specs import AgentPatch, AgentSpec
from gateway.canonical import (
    agent_json,
    agent_list_json,
    audit_page_json,
    context_list_json,
    context_page_json,
    hit_json,
    scrub_json,
    task_json,
)
from gateway.dialects import normalise_send_request
from gateway.errors import (
    AgentNotFoundError,
    UnsupportedOperationError,
)
from gateway.http import a2a_calls, push
from gateway.http.a2a_calls import Call
from gateway.http.audit import audit_request_id, note_receipt
from gateway.http.card_signing import JWKS_PATH, card_signature
from gateway.http.cards import CardSigner, agent_card
from gateway.http.keys import key_routes
from gateway.http.params import (
    json_body,
    query_bool,
    query_cursor,
    query_int,
    query_text,
    query_time_ms,
    validated,
)
from gateway.http.responses import JSONResponse
from gateway.http.sse import event_v03, sse_response
from gateway.http.state import AppState, app_state, principal_of
from gateway.models import SearchRequest
from gateway.service.audit import AuditQuery
from gateway.service.keys import admin_tenant

__all__ = [
    "agent_routes",
    "audit_routes",
    "key_routes",
    "openapi_text",
    "operational_routes",
    "registry_routes",
]

Endpoint = Callable[[Request], Awaitable[Response]]
_OPENAPI_CANDIDATES = (
    Path(__file__).resolve().parent.parent / "openapi.yaml",  # installed wheel
    Path(__file__).resolve().parent.parent.parent / "openapi.yaml",  # source checkout
)
MAX_PAGE = 1000


def _agent_id(request: Request) -> str:
    agent_id = request.path_params.get("agent_id")
    return agent_id if isinstance(agent_id, str) else app_state(request).settings.default_agent


async def _served(request: Request) -> AppState:
    """The app state, once the agent named by the path (or the default) is known to exist
    for the caller (built in, or registered by the caller's tenant)."""
    return (await _serving(request))[0]


async def _serving(request: Request) -> tuple[AppState, Agent]:
    """The app state and the agent named by the path (or the default), as the caller sees
    it: resolved once for the request."""
    state = app_state(request)
    return state, await state.agents.resolve(principal_of(request).tenant, _agent_id(request))


async def send_message(request: Request) -> Response:
    task = await a2a_calls.send(Call.of(request), normalise_send_request(await json_body(request)))
    return JSONResponse(a2a_calls.sent(task))


async def stream_message(request: Request) -> Response:
    body = normalise_send_request(await json_body(request))
    return sse_response(await a2a_calls.stream_send(Call.of(request), body), event_v03)


async def subscribe_task(request: Request) -> Response:
    if request.method == "POST":
        await json_body(request, optional=True)
    last = request.headers.get("last-event-id")
    task_id = request.path_params["task_id"]
    return sse_response(await a2a_calls.subscribe(Call.of(request), task_id, last), event_v03)


async def get_task(request: Request) -> Response:
    history = query_int(request, "historyLength", "history_length", default=None)
    task = await a2a_calls.get_task(Call.of(request), request.path_params["task_id"], history)
    return JSONResponse(task_json(task))


async def cancel_task(request: Request) -> Response:
    await json_body(request, optional=True)
    task = await a2a_calls.cancel_task(Call.of(request), request.path_params["task_id"])
    return JSONResponse(task_json(task))


def _page(request: Request, default_limit: int) -> tuple[int, int]:
    limit = query_int(request, "limit", default=default_limit, minimum=1, maximum=MAX_PAGE)
    offset = query_int(request, "offset", default=0)
    assert limit is not None and offset is not None
    return limit, offset


async def list_contexts(request: Request) -> Response:
    state = await _served(request)
    limit, offset = _page(request, 50)
    listing = await state.contexts.list(principal_of(request), limit, offset)
    return JSONResponse(context_list_json(listing))


async def read_context(request: Request) -> Response:
    state = await _served(request)
    limit, offset = _page(request, 100)
    page = await state.contexts.read(
        principal_of(request), request.path_params["context_id"], limit, offset
    )
    return JSONResponse(context_page_json(page))


async def delete_context(request: Request) -> Response:
    state = await _served(request)
    request_id = audit_request_id(request.scope)  # the forget job's entry names the scrub
    receipt = await state.contexts.delete(
        principal_of(request), request.path_params["context_id"], request_id
    )
    note_receipt(request.scope, scrub_json(receipt))
    return Response(status_code=204)


async def search_context(request: Request) -> Response:
    state = await _served(request)
    body = validated(SearchRequest, await json_body(request))
    found = await state.search.search(
        principal_of(request), request.path_params["context_id"], body.query, body.topK,
        body.minScore, body.mode,
    )  # fmt: skip
    return JSONResponse({"hits": [hit_json(h) for h in found.hits], "mode": found.mode})


async def card(request: Request) -> Response:
    state = app_state(request)
    agent_id = _agent_id(request)
    agent = state.agents.builtin(agent_id)
    if agent is None:
        principal = request.scope.get("state", {}).get("principal")
        if principal is None:  # anonymous callers see the built-in agents only
            raise AgentNotFoundError()
        agent = await state.agents.resolve(principal.tenant, agent_id)
    origin = state.settings.public_url or str(request.base_url).rstrip("/")
    url = origin if "agent_id" not in request.path_params else f"{origin}/agents/{agent_id}"
    grpc = None
    if state.settings.grpc_port is not None:
        host = urlsplit(origin).hostname or state.settings.host
        grpc = f"{f'[{host}]' if ':' in host else host}:{state.settings.grpc_port}"
    card_json = agent_card(
        agent,
        url,
        authenticated=not state.settings.open_mode,
        push=state.push is not None,
        grpc=grpc,
        agent_id=request.path_params.get("agent_id"),
        signer=_card_signer(state, origin),
    )
    return JSONResponse(card_json)


def _card_signer(state: AppState, origin: str) -> CardSigner | None:
    """Signs a card with the gateway's signing key (None: no key yet, the card goes unsigned)."""
    key = state.signing_keys.signer if state.signing_keys is not None else None
    if key is None:
        return None
    jku = origin + JWKS_PATH
    return lambda card: [card_signature(card, key, jku)]


class _IdConvertor(Convertor[str]):
    """A task or context id: one path segment without a colon, so ``/v1/tasks/x:cancel``
    is the cancel route's alone (the plain task route would take ``x:cancel`` as an id)."""

    regex = "[^/:]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("id", _IdConvertor())


def agent_routes(prefix: str) -> list[BaseRoute]:
    """The A2A surface of one agent base: ``""`` (default agent) or ``/agents/{agent_id}``."""
    table: list[tuple[str, Endpoint, list[str]]] = [
        ("/v1/message:send", send_message, ["POST"]),
        ("/v1/tasks/{task_id:id}:cancel", cancel_task, ["POST"]),
        ("/v1/message:stream", stream_message, ["POST"]),
        ("/v1/tasks/{task_id:id}:subscribe", subscribe_task, ["GET", "POST"]),
        ("/v1/tasks/{task_id:id}/pushNotificationConfigs", push.canonical_configs, ["GET", "POST"]),
        (
            "/v1/tasks/{task_id:id}/pushNotificationConfigs/{config_id}",
            push.canonical_config,
            ["GET", "DELETE"],
        ),
        ("/v1/tasks/{task_id:id}", get_task, ["GET"]),
        ("/v1/contexts", list_contexts, ["GET"]),
        ("/v1/contexts/{context_id:id}:search", search_context, ["POST"]),
        ("/v1/contexts/{context_id:id}", read_context, ["GET"]),
        ("/v1/contexts/{context_id:id}", delete_context, ["DELETE"]),
        ("/.well-known/agent-card.json", card, ["GET"]),
        ("/agent-card.json", card, ["GET"]),
    ]
    return [Route(prefix + path, fn, methods=methods) for path, fn, methods in table]


async def list_agents(request: Request) -> Response:
    return JSONResponse(
        agent_list_json(await app_state(request).registry.list(principal_of(request)))
    )


async def register_agent(request: Request) -> Response:
    spec = validated(AgentSpec, await json_body(request))
    ephemeral = query_bool(request, "ephemeral", default=False)
    view = await app_state(request).registry.create(principal_of(request), spec, ephemeral)
    return JSONResponse(
        agent_json(view), status_code=201, headers={"Location": f"/agents/{view.id}"}
    )


async def read_agent(request: Request) -> Response:
    agent_id = request.path_params["agent_id"]
    return JSONResponse(
        agent_json(await app_state(request).registry.read(principal_of(request), agent_id))
    )


async def change_agent(request: Request) -> Response:
    patch = validated(AgentPatch, await json_body(request))
    agent_id = request.path_params["agent_id"]
    changed = await app_state(request).registry.patch(principal_of(request), agent_id, patch)
    return JSONResponse(agent_json(changed))


async def delete_agent(request: Request) -> Response:
    await app_state(request).registry.delete(principal_of(request), request.path_params["agent_id"])
    return Response(status_code=204)


def registry_routes() -> list[BaseRoute]:
    return [
        Route("/agents", list_agents, methods=["GET"]),
        Route("/agents", register_agent, methods=["POST"]),
        Route("/agents/{agent_id}", read_agent, methods=["GET"]),
        Route("/agents/{agent_id}", change_agent, methods=["PATCH"]),
        Route("/agents/{agent_id}", delete_agent, methods=["DELETE"]),
    ]


async def read_audit(request: Request) -> Response:
    state = app_state(request)
    tenant = admin_tenant(principal_of(request))
    if state.audit is None:
        raise UnsupportedOperationError("The audit trail is off (GATEWAY_AUDIT=false)")
    query = AuditQuery(
        user=query_text(request, "user"),
        context=query_text(request, "context"),
        operation=query_text(request, "operation"),
        since_ms=query_time_ms(request, "since"),
        until_ms=query_time_ms(request, "until"),
        cursor=query_cursor(request, "cursor"),
        limit=query_int(request, "limit", default=100, minimum=1, maximum=MAX_PAGE) or 100,
    )
    return JSONResponse(audit_page_json(await state.audit.read(tenant, query)))


def audit_routes() -> list[BaseRoute]:
    return [Route("/audit", read_audit, methods=["GET"])]


async def healthz(request: Request) -> Response:
    """The process is up, and so is the embedded Redis if it has one (part of the gateway;
    an external Redis is /readyz's: restarting the gateway would not bring it back)."""
    state = app_state(request)
    if state.redis_embedded and not await _redis_answers(state):
        return JSONResponse(
            {"status": "unavailable", "checks": {"redis": "unreachable"}},
            status_code=503,
            headers={"Retry-After": "1"},
        )
    return JSONResponse({"status": "ok"})


async def _redis_answers(state: AppState) -> bool:
    try:
        return await state.store.ping()
    except Exception:
        return False


async def readyz(request: Request) -> Response:
    state = app_state(request)
    ok = await _redis_answers(state)
    cortadel = request.app.state.runtime.cortadel
    if ok and cortadel is not None:
        # Cortadel is not critical: without it runs go on (recall fails open, stores wait).
        health = await cortadel.health()
        return JSONResponse(
            {
                "status": "ready" if health == "ok" else "degraded",
                "checks": {"redis": "ok", "cortadel": health},
                "critical": ["redis"],
            }
        )
    if ok:
        return JSONResponse({"status": "ready", "checks": {"redis": "ok"}, "critical": ["redis"]})
    return JSONResponse(
        {"status": "unavailable", "checks": {"redis": "unreachable"}},
        status_code=503,
        headers={"Retry-After": "1"},
    )


def openapi_text() -> str:
    """The served contract: ``openapi.yaml`` at the repository root (or in the wheel)."""
    for path in _OPENAPI_CANDIDATES:
        if path.is_file():
            return path.read_text()
    raise FileNotFoundError("openapi.yaml")


async def metrics_text(request: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


async def openapi(request: Request) -> Response:
    return PlainTextResponse(openapi_text(), media_type="application/yaml")


def operational_routes(metrics: bool = True) -> list[BaseRoute]:
    """Health, readiness, the contract and, unless it has a port of its own, /metrics."""
    return [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/openapi.yaml", openapi, methods=["GET"]),
        Route("/.well-known/jwks.json", push.jwks, methods=["GET"]),
        *([Route("/metrics", metrics_text, methods=["GET"])] if metrics else []),
    ]
