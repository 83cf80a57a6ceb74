"""The proto-JSON REST bindings, thin adapters over the services (``gateway.http.a2a_calls``):

- A2A 0.3 proto-JSON (the 0.3 SDK's REST client) at ``{base}/a2a/v1/...``: requests are
  read by the tolerant reader, answers written with ``TASK_STATE_*``, ``ROLE_*``, message
  ``content``; a send without ``configuration.blocking`` does not block (proto3 leaves a
  false ``blocking`` off the wire). Errors are the gateway's REST body plus ``type`` (the
  error's name), as the 0.3 SDK's own server writes it: the 0.3 SDK reads the status, the
  1.x SDK's 0.3 compatibility transport maps ``type`` to its typed errors.
- A2A 1.0 at ``{base}/a2a/...`` (no ``/v1``), also under an optional ``/{tenant}`` segment
  that must name the caller's tenant, and at the root for the default agent: answers in the
  1.0 dialect.

  Errors are ``google.rpc.Status`` with an ``ErrorInfo`` (domain ``a2a-protocol.org``,
  ``reason`` the error's name in UPPER_SNAKE_CASE), which the 1.x SDK maps to its typed
  errors.

Both keep the HTTP statuses of the one error table (``gateway.errors``).

An ``A2A-Version`` header naming a version the gateway does not speak is
``VersionNotSupportedError`` on every route here.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.dialects import (
    V03_PROTO,
    V1,
    Dialect,
    normalise_send_request,
    read_v1_send,
    rpc_status,
    task_out,
)
from gateway.errors import (
    ExtendedCardNotConfiguredError,
    GatewayError,
)
from gateway.http import push
from gateway.http.a2a_calls import (
    Call,
    cancel_task,
    get_task,
    list_tasks,
    negotiated_version,
    send,
    sent,
    stream_send,
    subscribe,
)
from gateway.http.audit import on_unaudited
from gateway.http.cards import REST_SUFFIX
from gateway.http.params import json_body, query_bool, query_int
from gateway.http.responses import JSONResponse
from gateway.http.sse import Shape, event_v03_proto, event_v1, sse_response
from gateway.push.configs import Version

__all__ = ["proto_rest_routes"]

Endpoint = Callable[[Request], Awaitable[Response]]


def _refuse(error: type[GatewayError]) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        raise error()

    return endpoint


# --- the operations, one handler factory each, for either dialect ---------------------

# Per dialect: the suffix of its routes' names (the audit operation: ``send_v03``,
# ``send_v1``), the stream events' shape, the version a send's push config is for.
_SUFFIX: dict[Dialect, str] = {V03_PROTO: "v03", V1: "v1"}
_EVENTS: dict[Dialect, Shape] = {V03_PROTO: event_v03_proto, V1: event_v1}
_VERSION: dict[Dialect, Version] = {V03_PROTO: "0.3", V1: "1.0"}


def _named(operation: str, dialect: Dialect) -> Callable[[Endpoint], Endpoint]:
    """Names an operation's endpoint for its dialect (``send_v03``): the route's name."""

    def name(endpoint: Endpoint) -> Endpoint:
        endpoint.__name__ = endpoint.__qualname__ = f"{operation}_{_SUFFIX[dialect]}"
        return endpoint

    return name


async def _body(request: Request, dialect: Dialect, *, optional: bool = False) -> Any:
    """The request's JSON body; in 1.0, a ``tenant`` it names must be the caller's."""
    body = await json_body(request, optional=optional)
    if dialect == V1 and isinstance(body, dict):
        Call.of(request).check_tenant(body.get("tenant"))
    return body


async def _send_request(request: Request, dialect: Dialect) -> Any:
    """A send's (or stream's) body in the canonical spelling."""
    body = await _body(request, dialect)
    return read_v1_send(body) if dialect == V1 else normalise_send_request(body)


def send_handler(dialect: Dialect) -> Endpoint:
    @_named("send", dialect)
    async def endpoint(request: Request) -> Response:
        body = await _send_request(request, dialect)
        if dialect == V03_PROTO and isinstance(body, dict):
            config = body.get("configuration")
            if config is None:
                body["configuration"] = config = {}
            if isinstance(config, dict):
                config.setdefault("blocking", False)  # proto3: a false blocking is left off
        task = await send(Call.of(request), body, _VERSION[dialect])
        return JSONResponse(sent(task, dialect))

    return endpoint


def stream_handler(dialect: Dialect) -> Endpoint:
    @_named("stream", dialect)
    async def endpoint(request: Request) -> Response:
        stream = await stream_send(Call.of(request), await _send_request(request, dialect))
        return sse_response(stream, _EVENTS[dialect])

    return endpoint


def subscribe_handler(dialect: Dialect) -> Endpoint:
    """Subscribing to an ended task: 0.3 answers its final state, 1.0 refuses it."""

    @_named("subscribe", dialect)
    async def endpoint(request: Request) -> Response:
        if request.method == "POST":
            await _body(request, dialect, optional=True)
        last = request.headers.get("last-event-id")
        task_id = request.path_params["task_id"]
        stream = await subscribe(Call.of(request), task_id, last, terminal=dialect != V1)
        return sse_response(stream, _EVENTS[dialect])

    return endpoint


def get_handler(dialect: Dialect) -> Endpoint:
    @_named("get", dialect)
    async def endpoint(request: Request) -> Response:
        history = query_int(request, "historyLength", "history_length", default=None)
        task = await get_task(Call.of(request), request.path_params["task_id"], history)
        return JSONResponse(task_out(task, dialect))

    return endpoint


def cancel_handler(dialect: Dialect) -> Endpoint:
    @_named("cancel", dialect)
    async def endpoint(request: Request) -> Response:
        await _body(request, dialect, optional=True)
        task = await cancel_task(Call.of(request), request.path_params["task_id"])
        return JSONResponse(task_out(task, dialect))

    return endpoint


def _list_params(request: Request) -> dict[str, Any]:
    q = request.query_params
    params: dict[str, Any] = {
        "pageSize": query_int(request, "pageSize", "page_size", default=None, maximum=100),
        "historyLength": query_int(request, "historyLength", "history_length", default=None),
        "includeArtifacts": query_bool(request, "includeArtifacts", default=False),
    }
    for name, alias in (
        ("contextId", "context_id"),
        ("status", "status"),
        ("pageToken", "page_token"),
        ("statusTimestampAfter", "status_timestamp_after"),
    ):
        value = q.get(name, q.get(alias))
        if value is not None:
            params[name] = value
    if params.get("status", "").isascii() and params.get("status", "").isdigit():
        params["status"] = int(params["status"])  # an enum's number
    return params


async def list_v1(request: Request) -> Response:
    return JSONResponse(await list_tasks(Call.of(request), _list_params(request)))


# --- routes ---------------------------------------------------------------------------


def _v03_body(exc: GatewayError) -> dict[str, Any]:
    """The gateway's error body, with the 0.3 SDK server's ``type`` (the error's name)."""
    return {**exc.body(), "type": exc.name}


def _rendered(endpoint: Endpoint, render: Callable[[GatewayError], Any]) -> Endpoint:
    """A route of these bindings: the version header and tenant segment checked, errors
    rendered by ``render`` with the error table's status."""

    @functools.wraps(endpoint)  # the route (and its audit operation) keeps the handler's name
    async def wrapped(request: Request) -> Response:
        def failed(exc: GatewayError) -> Response:
            return JSONResponse(render(exc), status_code=exc.status, headers=exc.headers())

        on_unaudited(request.scope, failed)
        try:
            negotiated_version(request)
            Call.of(request).check_tenant(request.path_params.get("tenant"))
            return await endpoint(request)
        except GatewayError as exc:
            return failed(exc)

    return wrapped


_NO_EXTENDED_CARD = _refuse(ExtendedCardNotConfiguredError)


def _table(dialect: Dialect) -> list[tuple[str, Endpoint, list[str]]]:
    """One dialect's routes below an agent's REST base: 0.3 under ``/v1``; 1.0 also lists
    tasks, and names the extended card ``/extendedAgentCard``."""
    v03 = dialect == V03_PROTO
    top = "/v1" if v03 else ""
    task = top + "/tasks/{task_id:id}"
    configs, config = (
        (push.v03_configs, push.v03_config) if v03 else (push.v1_configs, push.v1_config)
    )
    listing = [] if v03 else [("/tasks", list_v1, ["GET"])]
    return [
        (top + "/message:send", send_handler(dialect), ["POST"]),
        (top + "/message:stream", stream_handler(dialect), ["POST"]),
        *listing,
        (task + ":cancel", cancel_handler(dialect), ["POST"]),
        (task + ":subscribe", subscribe_handler(dialect), ["GET", "POST"]),
        (task + "/pushNotificationConfigs", configs, ["GET", "POST"]),
        (task + "/pushNotificationConfigs/{config_id}", config, ["GET", "DELETE"]),
        (task, get_handler(dialect), ["GET"]),
        (top + ("/card" if v03 else "/extendedAgentCard"), _NO_EXTENDED_CARD, ["GET"]),
    ]


# Where each binding is served. 0.3: each agent's advertised REST URL (``{base}/a2a``).
# 1.0: the same, with the optional tenant segment after it, and the host root for the
# default agent (some 1.0 clients call ``/message:send`` whatever the interface URL says).
V03_PREFIXES = (REST_SUFFIX, "/agents/{agent_id}" + REST_SUFFIX)
V1_PREFIXES = (
    REST_SUFFIX,
    "/agents/{agent_id}" + REST_SUFFIX,
    "",
    REST_SUFFIX + "/{tenant}",
    "/agents/{agent_id}" + REST_SUFFIX + "/{tenant}",
)


def proto_rest_routes() -> list[BaseRoute]:
    """Both proto-JSON REST bindings of every agent base; the 0.3 routes first, so their
    literal ``/v1`` wins over a tenant segment."""
    routes: list[BaseRoute] = []
    bindings = ((V03_PROTO, V03_PREFIXES, _v03_body), (V1, V1_PREFIXES, rpc_status))
    for dialect, prefixes, render in bindings:
        table = _table(dialect)
        for prefix in prefixes:
            for path, fn, methods in table:
                routes.append(Route(prefix + path, _rendered(fn, render), methods=methods))
    return routes
