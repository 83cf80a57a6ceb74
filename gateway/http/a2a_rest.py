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

from gateway.dialects import V03_PROTO, V1, read_v1_send, rpc_status, task_out
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
    stream_send,
    subscribe,
)
from gateway.http.cards import REST_SUFFIX
from gateway.http.params import json_body, query_bool, query_int
from gateway.http.responses import JSONResponse
from gateway.http.sse import event_v03_proto, event_v1, sse_response
from gateway.protojson import normalise_send_request

__all__ = ["proto_rest_routes"]

Endpoint = Callable[[Request], Awaitable[Response]]


def _refuse(error: type[GatewayError]) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        raise error()

    return endpoint


# --- A2A 0.3 proto-JSON ---------------------------------------------------------------


async def send_v03(request: Request) -> Response:
    body = normalise_send_request(await json_body(request))
    if isinstance(body, dict):
        config = body.get("configuration")
        if config is None:
            body["configuration"] = config = {}
        if isinstance(config, dict):
            config.setdefault("blocking", False)  # proto3: a false blocking is left off
    task = await send(Call.of(request), body)
    return JSONResponse({"task": task_out(task, V03_PROTO)})


async def stream_v03(request: Request) -> Response:
    body = normalise_send_request(await json_body(request))
    stream = await stream_send(Call.of(request), body)
    return sse_response(stream, event_v03_proto)


async def subscribe_v03(request: Request) -> Response:
    if request.method == "POST":
        await json_body(request, optional=True)
    last = request.headers.get("last-event-id")
    stream = await subscribe(Call.of(request), request.path_params["task_id"], last)
    return sse_response(stream, event_v03_proto)


async def get_v03(request: Request) -> Response:
    history = query_int(request, "historyLength", "history_length", default=None)
    task = await get_task(Call.of(request), request.path_params["task_id"], history)
    return JSONResponse(task_out(task, V03_PROTO))


async def cancel_v03(request: Request) -> Response:
    await json_body(request, optional=True)
    task = await cancel_task(Call.of(request), request.path_params["task_id"])
    return JSONResponse(task_out(task, V03_PROTO))


# --- A2A 1.0 --------------------------------------------------------------------------


def _v03_body(exc: GatewayError) -> dict[str, Any]:
    """The gateway's error body, with the 0.3 SDK server's ``type`` (the error's name)."""
    return {**exc.body(), "type": exc.name}


def _rendered(endpoint: Endpoint, render: Callable[[GatewayError], Any]) -> Endpoint:
    """A route of these bindings: the version header and tenant segment checked, errors
    rendered by ``render`` with the error table's status."""

    @functools.wraps(endpoint)  # the route (and its audit operation) keeps the handler's name
    async def wrapped(request: Request) -> Response:
        try:
            negotiated_version(request)
            Call.of(request).check_tenant(request.path_params.get("tenant"))
            return await endpoint(request)
        except GatewayError as exc:
            return JSONResponse(render(exc), status_code=exc.status, headers=exc.headers())

    return wrapped


async def send_v1(request: Request) -> Response:
    body = await json_body(request)
    if isinstance(body, dict):
        Call.of(request).check_tenant(body.get("tenant"))
    task = await send(Call.of(request), read_v1_send(body), "1.0")
    return JSONResponse({"task": task_out(task, V1)})


async def stream_v1(request: Request) -> Response:
    body = await json_body(request)
    if isinstance(body, dict):
        Call.of(request).check_tenant(body.get("tenant"))
    stream = await stream_send(Call.of(request), read_v1_send(body))
    return sse_response(stream, event_v1)


async def subscribe_v1(request: Request) -> Response:
    if request.method == "POST":
        body = await json_body(request, optional=True)
        if isinstance(body, dict):
            Call.of(request).check_tenant(body.get("tenant"))
    last = request.headers.get("last-event-id")
    stream = await subscribe(Call.of(request), request.path_params["task_id"], last, terminal=False)
    return sse_response(stream, event_v1)


async def get_v1(request: Request) -> Response:
    history = query_int(request, "historyLength", "history_length", default=None)
    task = await get_task(Call.of(request), request.path_params["task_id"], history)
    return JSONResponse(task_out(task, V1))


async def cancel_v1(request: Request) -> Response:
    await json_body(request, optional=True)
    task = await cancel_task(Call.of(request), request.path_params["task_id"])
    return JSONResponse(task_out(task, V1))


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
    return params


async def list_v1(request: Request) -> Response:
    return JSONResponse(await list_tasks(Call.of(request), _list_params(request)))


_NO_EXTENDED_CARD = _refuse(ExtendedCardNotConfiguredError)


def _v03_table() -> list[tuple[str, Endpoint, list[str]]]:
    return [
        ("/v1/message:send", send_v03, ["POST"]),
        ("/v1/message:stream", stream_v03, ["POST"]),
        ("/v1/tasks/{task_id:id}:cancel", cancel_v03, ["POST"]),
        ("/v1/tasks/{task_id:id}:subscribe", subscribe_v03, ["GET", "POST"]),
        ("/v1/tasks/{task_id:id}/pushNotificationConfigs", push.v03_configs, ["GET", "POST"]),
        (
            "/v1/tasks/{task_id:id}/pushNotificationConfigs/{config_id}",
            push.v03_config,
            ["GET", "DELETE"],
        ),
        ("/v1/tasks/{task_id:id}", get_v03, ["GET"]),
        ("/v1/card", _NO_EXTENDED_CARD, ["GET"]),
    ]


def _v1_table() -> list[tuple[str, Endpoint, list[str]]]:
    return [
        ("/message:send", send_v1, ["POST"]),
        ("/message:stream", stream_v1, ["POST"]),
        ("/tasks", list_v1, ["GET"]),
        ("/tasks/{task_id:id}:cancel", cancel_v1, ["POST"]),
        ("/tasks/{task_id:id}:subscribe", subscribe_v1, ["GET", "POST"]),
        ("/tasks/{task_id:id}/pushNotificationConfigs", push.v1_configs, ["GET", "POST"]),
        (
            "/tasks/{task_id:id}/pushNotificationConfigs/{config_id}",
            push.v1_config,
            ["GET", "DELETE"],
        ),
        ("/tasks/{task_id:id}", get_v1, ["GET"]),
        ("/extendedAgentCard", _NO_EXTENDED_CARD, ["GET"]),
    ]


# Where the 1.0 binding is served: each agent's advertised REST URL (``{base}/a2a``), with
# the optional tenant segment after it, and the host root for the default agent (some 1.0
# clients call ``/message:send`` whatever the interface URL says).
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
    for base in ("", "/agents/{agent_id}"):
        for path, fn, methods in _v03_table():
            routes.append(
                Route(base + REST_SUFFIX + path, _rendered(fn, _v03_body), methods=methods)
            )
    for prefix in V1_PREFIXES:
        for path, fn, methods in _v1_table():
            routes.append(Route(prefix + path, _rendered(fn, rpc_status), methods=methods))
    return routes
