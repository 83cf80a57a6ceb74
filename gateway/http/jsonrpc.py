"""The JSON-RPC 2.0 binding: A2A 0.3 (``message/send``...) and 1.0 (``SendMessage``...) at
one URL per agent base (``POST /`` for the default agent, ``POST /agents/{id}``).

A thin adapter: each method reads its params into the core's typed request, calls the same
service as the REST routes, and writes the result in its version's dialect. Errors are the
one error table's (``gateway.errors``), rendered as JSON-RPC error objects: 0.3 puts the
gateway's error body in ``error.data``, 1.0 a list of ``google.rpc`` details.

The version is told by the method name (``SendMessage`` is 1.0, ``message/send`` 0.3), as
clients may leave the ``A2A-Version`` header out; a header naming a version the gateway does
not speak is refused with ``VersionNotSupportedError``.

JSON-RPC 2.0 details: an id is echoed as given (string, number or null; a number exactly as
written, an integer of any size included); a request without
an ``id`` member is a notification and gets no answer (a request of notifications only gets
204); a batch (an array) of at most ``MAX_BATCH`` requests is answered with an array in the
same order, its calls run concurrently; an empty or larger batch is one
``InvalidRequestError``. Each call of a batch counts against the caller's rate limits as a
request of its own (the HTTP request paid for the first, the others are charged at once):
the calls beyond the limit, the batch's last ones, are each answered ``RateLimitedError``.
Transport-level failures (no credentials, a foreign host, a body too large, a request over
the rate limits) stay HTTP errors with the REST body, as they happen before JSON-RPC is read.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.canonical import task_json
from gateway.dialects import V1, jsonrpc_error_v1, normalise_send_request, read_v1_send, task_out
from gateway.errors import (
    ExtendedCardNotConfiguredError,
    GatewayError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    StreamsLimitedError,
    StreamsUnavailableError,
    UnsupportedOperationError,
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
from gateway.http.operations import Operation, error_outcome, note
from gateway.http.params import json_body
from gateway.http.ratelimit import Charge
from gateway.http.sse import Shape, event_v03, event_v1, sse_one, sse_response
from gateway.models import Task
from gateway.service.streams import TaskStream

__all__ = ["MAX_BATCH", "METHODS", "STREAMING", "jsonrpc_endpoint", "jsonrpc_routes"]

MAX_BATCH = 100
log = logging.getLogger("gateway.http")
_NO_ANSWER = object()
Params = dict[str, Any]
Handler = Callable[[Call, Params], Awaitable[Any]]


@dataclass(frozen=True)
class Method:
    """A method's handler (its answer in its version's dialect); ``task``, for a method
    answered with a Task, the handler's Task before a dialect writes it (gRPC writes it)."""

    handler: Handler
    v1: bool
    task: Callable[[Call, Params], Awaitable[Task]] | None = None


def _refuse(error: type[GatewayError]) -> Handler:
    async def handler(call: Call, params: Params) -> Any:
        raise error()

    return handler


# --- A2A 0.3 ------------------------------------------------------------------------


async def _send_v03(call: Call, params: Params) -> Any:
    return task_json(await send(call, normalise_send_request(params)))


async def _get_v03(call: Call, params: Params) -> Any:
    return task_json(await get_task(call, params.get("id"), params.get("historyLength")))


async def _cancel_v03(call: Call, params: Params) -> Any:
    return task_json(await cancel_task(call, params.get("id")))


# --- A2A 1.0 ------------------------------------------------------------------------


async def _send_task_v1(call: Call, params: Params) -> Task:
    call.check_tenant(params.get("tenant"))
    return await send(call, read_v1_send(params), "1.0")


async def _get_task_v1(call: Call, params: Params) -> Task:
    call.check_tenant(params.get("tenant"))
    return await get_task(call, params.get("id"), params.get("historyLength"))


async def _cancel_task_v1(call: Call, params: Params) -> Task:
    call.check_tenant(params.get("tenant"))
    return await cancel_task(call, params.get("id"))


def _v1(task: Callable[[Call, Params], Awaitable[Task]], envelope: bool = False) -> Method:
    """A 1.0 method answered with a Task (under ``task`` when ``envelope``)."""

    async def handler(call: Call, params: Params) -> Any:
        answer = await task(call, params)
        return sent(answer, V1) if envelope else task_out(answer, V1)

    return Method(handler, v1=True, task=task)


async def _list_v1(call: Call, params: Params) -> Any:
    call.check_tenant(params.get("tenant"))
    return await list_tasks(call, params)


# --- streaming methods: answered with server-sent events, one JSON-RPC response each ----


@dataclass(frozen=True)
class StreamMethod:
    open: Callable[[Call, Params, str | None], Awaitable[TaskStream]]
    shape: Shape
    v1: bool


async def _stream_v03(call: Call, params: Params, last_event_id: str | None) -> TaskStream:
    return await stream_send(call, normalise_send_request(params))


async def _resubscribe_v03(call: Call, params: Params, last_event_id: str | None) -> TaskStream:
    return await subscribe(call, params.get("id"), last_event_id)


async def _stream_v1(call: Call, params: Params, last_event_id: str | None) -> TaskStream:
    call.check_tenant(params.get("tenant"))
    return await stream_send(call, read_v1_send(params))


async def _subscribe_v1(call: Call, params: Params, last_event_id: str | None) -> TaskStream:
    call.check_tenant(params.get("tenant"))
    return await subscribe(call, params.get("id"), last_event_id, terminal=False)


STREAMING: dict[str, StreamMethod] = {
    "message/stream": StreamMethod(_stream_v03, event_v03, v1=False),
    "tasks/resubscribe": StreamMethod(_resubscribe_v03, event_v03, v1=False),
    "SendStreamingMessage": StreamMethod(_stream_v1, event_v1, v1=True),
    "SubscribeToTask": StreamMethod(_subscribe_v1, event_v1, v1=True),
}

METHODS: dict[str, Method] = {
    "message/send": Method(_send_v03, v1=False),
    "tasks/get": Method(_get_v03, v1=False),
    "tasks/cancel": Method(_cancel_v03, v1=False),
    "agent/getAuthenticatedExtendedCard": Method(_refuse(ExtendedCardNotConfiguredError), v1=False),
    **{name: Method(handler, v1=False) for name, handler in push.JSONRPC_V03.items()},
    "SendMessage": _v1(_send_task_v1, envelope=True),
    "GetTask": _v1(_get_task_v1),
    "ListTasks": Method(_list_v1, v1=True),
    "CancelTask": _v1(_cancel_task_v1),
    "GetExtendedAgentCard": Method(_refuse(ExtendedCardNotConfiguredError), v1=True),
    **{name: Method(handler, v1=True) for name, handler in push.JSONRPC_V1.items()},
}


def _error(exc: GatewayError, v1: bool) -> dict[str, Any]:
    if v1:
        return jsonrpc_error_v1(exc)
    return {"code": exc.code, "message": exc.message, "data": exc.body()}


def _answer(request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> Any:
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _valid_id(value: Any) -> bool:
    if isinstance(value, orjson.Fragment):  # a number, as written (see _exact_ids)
        return True
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


class _Number(str):
    """A number's token as written in the body."""


def _exact_ids(raw: bytes, body: Any) -> Any:
    """``body`` with each id that orjson read as a float (an integer beyond 64 bits, a
    number with a fraction or an exponent) replaced by its token as the client wrote it:
    echoed, it is the same id. The body is read again for them, only when there are some."""
    entries = body if isinstance(body, list) else [body]
    if not any(isinstance(e, dict) and isinstance(e.get("id"), float) for e in entries):
        return body
    try:
        again = json.loads(raw, parse_int=_Number, parse_float=_Number)
    except ValueError:  # not expected: orjson read it, and is the stricter
        return body
    for entry, read in zip(entries, again if isinstance(again, list) else [again], strict=True):
        if isinstance(entry, dict) and isinstance(entry.get("id"), float):
            entry["id"] = orjson.Fragment(str(read["id"]))
    return body


async def _one(
    request: Request, version: str | None, entry: Any, refused: GatewayError | None = None
) -> Any:
    """The answer to one request object (``_NO_ANSWER`` for a notification); ``refused``:
    the rate limits' refusal of a well-formed one."""
    operation = note(request.scope, "jsonrpc", "unknown")  # named once it is one of ours
    if not isinstance(entry, dict):
        operation.outcome = InvalidRequestError.name
        return _answer(None, error=_error(InvalidRequestError(), False))
    request_id = entry.get("id")
    notification = "id" not in entry
    method = METHODS.get(entry["method"]) if isinstance(entry.get("method"), str) else None
    v1 = method.v1 if method is not None else version == "1.0"
    try:
        if (
            entry.get("jsonrpc") != "2.0"
            or not isinstance(entry.get("method"), str)
            or not _valid_id(request_id)
        ):
            notification = False
            request_id = request_id if _valid_id(request_id) else None
            raise InvalidRequestError()
        # the method's name, if it is one of ours (anything else may be any text)
        if method is not None or entry["method"] in STREAMING:
            operation.name = entry["method"]
        if refused is not None:
            raise refused
        if method is None and entry["method"] in STREAMING:
            v1 = STREAMING[entry["method"]].v1
            raise UnsupportedOperationError("A streaming method cannot be part of a batch")
        if method is None:
            raise MethodNotFoundError()
        params = entry.get("params", {})
        if not isinstance(params, dict):
            raise InvalidParamsError("params must be an object")
        result = await method.handler(Call.of(request), params)
    except Exception as exc:
        return _failed(exc, operation, _NO_ANSWER if notification else request_id, v1)
    return _NO_ANSWER if notification else _answer(request_id, result=result)


def _failed(exc: Exception, operation: Operation, request_id: Any, v1: bool) -> Any:
    """The error answer of a call that raised, its outcome noted; a notification (its
    ``request_id`` given as ``_NO_ANSWER``) gets none."""
    if not isinstance(exc, GatewayError):  # a defect: an InternalError, without detail
        log.error("unhandled error", extra={"error": type(exc).__name__, "path": "jsonrpc"})
        exc = GatewayError()
    operation.outcome = error_outcome(exc)
    if request_id is _NO_ANSWER:
        return _NO_ANSWER
    return _answer(request_id, error=_error(exc, v1))


def _unaudited(answer: Any, entry: Any, version: str | None, failure: GatewayError) -> Any:
    """A call's answer once its audit entry could not be written: a result becomes the
    failure (not reported done); an error stays as it is."""
    if not isinstance(answer, dict) or "result" not in answer:
        return answer
    name = entry.get("method") if isinstance(entry, dict) else None
    method = METHODS.get(name) if isinstance(name, str) else None
    v1 = method.v1 if method is not None else version == "1.0"
    return _answer(answer["id"], error=_error(failure, v1))


def _render(payload: Any) -> Response:
    return Response(orjson.dumps(payload), media_type="application/json")


def _stream_refused(exc: Exception, entry: dict[str, Any], request_id: Any, v1: bool) -> Response:
    """A stream refused before it began: one error response on the stream, or, over the
    stream limits, the HTTP refusal (429 / 503 with Retry-After) with the error as body."""
    if not isinstance(exc, GatewayError):
        log.error("unhandled error", extra={"error": type(exc).__name__, "path": "jsonrpc"})
        exc = GatewayError()
    if isinstance(exc, StreamsLimitedError | StreamsUnavailableError):
        answer = _answer(request_id if "id" in entry else None, error=_error(exc, v1))
        return Response(orjson.dumps(answer), exc.status, exc.headers(), "application/json")
    if "id" not in entry:
        return Response(status_code=204)
    return sse_one(_answer(request_id, error=_error(exc, v1)))


async def _streamed(request: Request, entry: dict[str, Any]) -> Response:
    """A streaming method: its events, each a JSON-RPC response with the request's id. A
    refusal is one error response on the stream (the official clients read the stream for
    it), as is an error that ends the stream early."""
    method = STREAMING[entry["method"]]
    request_id = entry.get("id")
    operation = note(request.scope, "jsonrpc", entry["method"])
    try:
        if entry.get("jsonrpc") != "2.0" or not _valid_id(request_id):
            request_id = request_id if _valid_id(request_id) else None
            raise InvalidRequestError()
        params = entry.get("params", {})
        if not isinstance(params, dict):
            raise InvalidParamsError("params must be an object")
        stream = await method.open(Call.of(request), params, request.headers.get("last-event-id"))
    except Exception as exc:
        operation.outcome = error_outcome(exc)
        return _stream_refused(exc, entry, request_id, method.v1)
    if "id" not in entry:  # a notification: done (a send is stored), no answer
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()
        return Response(status_code=204)

    def failure(exc: GatewayError) -> dict[str, Any]:
        return _answer(request_id, error=_error(exc, method.v1))  # type: ignore[no-any-return]

    def wrap(result: Any) -> dict[str, Any]:
        return _answer(request_id, result=result)  # type: ignore[no-any-return]

    return sse_response(stream, method.shape, wrap, failure)


async def jsonrpc_endpoint(request: Request) -> Response:
    try:
        version = negotiated_version(request)
        body = _exact_ids(await request.body(), await json_body(request))
    except GatewayError as exc:
        note(request.scope, "jsonrpc", "unknown").outcome = error_outcome(exc)
        return _render(_answer(None, error=_error(exc, False)))
    if (
        isinstance(body, dict)
        and isinstance(body.get("method"), str)
        and body["method"] in STREAMING
    ):
        return await _streamed(request, body)
    if not isinstance(body, list):
        answer = await _one(request, version, body)
        if answer is _NO_ANSWER:
            return Response(status_code=204)
        on_unaudited(request.scope, lambda f: _render(_unaudited(answer, body, version, f)))
        return _render(answer)
    if not body or len(body) > MAX_BATCH:
        message = f"A batch holds 1 to {MAX_BATCH} requests"
        note(request.scope, "jsonrpc", "unknown").outcome = InvalidRequestError.name
        return _render(_answer(None, error=_error(InvalidRequestError(message), False)))
    passed, refused = len(body), None
    charge: Charge | None = request.scope["state"].get("rate_limit")
    if charge is not None:  # the request paid for its first call; the others each count
        more, refused = await charge.more(len(body) - 1)
        passed = 1 + more
    answers = await asyncio.gather(
        *(
            _one(request, version, entry, None if n < passed else refused)
            for n, entry in enumerate(body)
        )
    )
    kept = [(a, entry) for a, entry in zip(answers, body, strict=True) if a is not _NO_ANSWER]
    if not kept:
        return Response(status_code=204)
    on_unaudited(request.scope, lambda f: _render([_unaudited(a, e, version, f) for a, e in kept]))
    return _render([a for a, _ in kept])


def jsonrpc_routes() -> list[BaseRoute]:
    """JSON-RPC at each agent base: the default agent's (``/``) and ``/agents/{id}``."""
    return [
        Route("/", jsonrpc_endpoint, methods=["POST"]),
        Route("/agents/{agent_id}", jsonrpc_endpoint, methods=["POST"]),
    ]
