"""``A2AService`` of the A2A 1.0 ``a2a.proto``: each method a thin adapter over the 1.0
JSON-RPC methods' handlers (``gateway.http.jsonrpc``), which call the services.

A request is read into its proto3 JSON (the 1.0 dialect the other 1.0 bindings read; a
send's by ``dialects.read_send_proto``, the others' by ``MessageToDict``) and handed to the
method of the same name. A method answered with a Task has its Task written into the reply
message (``dialects.write_task``); the others' answers are parsed back into theirs
(``ParseDict``). Streams are the services' task streams written as ``StreamResponse``
messages (``dialects.write_stream_event``; HTTP/2 keeps the connection alive; the streams'
keep-alive ticks are dropped); a client that goes away or whose deadline passes ends its
stream only. The handlers are built from the service's descriptor: one table, no method by
hand.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message

from gateway import tracing
from gateway.dialects import read_send_proto, write_stream_event, write_task
from gateway.errors import GatewayError
from gateway.grpcapi.edge import Edge, Visit
from gateway.grpcapi.proto import a2a_pb2
from gateway.grpcapi.status import DETAILS_KEY, grpc_error
from gateway.http.a2a_calls import Call
from gateway.http.jsonrpc import METHODS, STREAMING
from gateway.http.operations import error_outcome

__all__ = ["SERVICE", "a2a_handler"]

log = logging.getLogger("gateway.grpc")
SERVICE = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
Metadata = Sequence[tuple[str, Any]]


def _reply(payload: Any, kind: type[Message]) -> Message:
    # Fields of a newer proto than this one are dropped, as a 1.0 client drops them.
    return ParseDict(payload or {}, kind(), ignore_unknown_fields=True)


def _reader(kind: type[Message]) -> Callable[[Message], dict[str, Any]]:
    """How a request of ``kind`` is read into its proto3 JSON."""
    if kind.DESCRIPTOR.name == "SendMessageRequest":
        return read_send_proto
    return MessageToDict


def _answerer(
    name: str, reply: type[Message]
) -> Callable[[Call, dict[str, Any]], Awaitable[Message]]:
    """The method's answer as its reply message: a Task written into it (the reply itself,
    or its ``task``), any other answer parsed into it."""
    method = METHODS[name]
    task, handler = method.task, method.handler
    if task is None:
        return lambda call, params: _parsed(handler(call, params), reply)
    itself = "task" not in reply.DESCRIPTOR.fields_by_name  # a Task, not a send's answer

    async def answer(call: Call, params: dict[str, Any]) -> Message:
        out = reply()
        envelope: Any = out
        write_task(out if itself else envelope.task, await task(call, params))
        return out

    return answer


async def _parsed(payload: Awaitable[Any], reply: type[Message]) -> Message:
    return _reply(await payload, reply)


async def _fail(
    exc: BaseException, edge: Edge, visit: Visit, context: grpc.aio.ServicerContext[Any, Any]
) -> None:
    """Ends the call with the error's status (raises), its audit entry written first."""
    if not isinstance(exc, GatewayError):  # a defect: an InternalError, without detail
        log.error("unhandled error", extra={"error": type(exc).__name__, "path": "grpc"})
        exc = GatewayError()
    visit.operation.outcome = error_outcome(exc)
    visit.status = exc.status
    code, message, details = grpc_error(exc)
    tracing.annotate({"rpc.grpc.status_code": code.value[0]})
    if exc.status >= 500:
        tracing.failed(exc)
    if not visit.audited:
        await edge.audited(visit)
    await context.abort(code, message, trailing_metadata=((DETAILS_KEY, details),))


def _span(name: str, metadata: Metadata) -> AbstractContextManager[Any]:
    """The call's span, a child of the caller's ``traceparent`` if it sent one."""
    parent = next((v for k, v in metadata if k == "traceparent" and isinstance(v, str)), "")
    attributes = {"rpc.system": "grpc", "rpc.service": SERVICE.full_name, "rpc.method": name}
    return tracing.call_span(f"{SERVICE.full_name}/{name}", attributes, parent)


def _unary(
    edge: Edge, name: str, request_kind: type[Message], reply: type[Message]
) -> Callable[[Message, grpc.aio.ServicerContext[Any, Any]], Awaitable[Message]]:
    read, answer_of = _reader(request_kind), _answerer(name, reply)

    async def handle(request: Message, context: grpc.aio.ServicerContext[Any, Any]) -> Message:
        metadata = tuple(context.invocation_metadata() or ())
        visit = edge.visit(name, metadata, context.peer())
        with _span(name, metadata):
            try:
                params = read(request)
                call = await edge.enter(visit, metadata, params)
                answer = await answer_of(call, params)
                failure = await edge.audited(visit)
                if failure is not None:  # not reported done unless audited
                    raise failure
                return answer
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await _fail(exc, edge, visit, context)
                raise  # not reached: abort raised
            finally:
                edge.done(visit)

    return handle


def _streaming(
    edge: Edge, name: str, request_kind: type[Message], reply: type[Message]
) -> Callable[[Message, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[Message]]:
    method, read = STREAMING[name], _reader(request_kind)

    async def handle(
        request: Message, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Message]:
        metadata = tuple(context.invocation_metadata() or ())
        visit = edge.visit(name, metadata, context.peer())
        stream = None
        try:
            with _span(name, metadata):  # the opening: its events are the task's spans'
                try:
                    params = read(request)
                    call = await edge.enter(visit, metadata, params)
                    # the task as it stands first, then its events
                    stream = opened = await method.open(call, params, None)
                except Exception as exc:
                    await _fail(exc, edge, visit, context)
                    raise  # not reached: abort raised
            async for event in opened:
                if event is not None:  # None: a keep-alive tick
                    out = reply()
                    write_stream_event(out, event.task_id, event.context_id, event.data)
                    yield out
            await edge.audited(visit)  # before the stream's end reaches the client
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _fail(exc, edge, visit, context)
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
            edge.done(visit)

    return handle


def a2a_handler(edge: Edge) -> grpc.GenericRpcHandler:
    """The service's handlers, over ``edge``."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in SERVICE.methods:
        request = message_factory.GetMessageClass(method.input_type)
        reply = message_factory.GetMessageClass(method.output_type)
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                _streaming(edge, method.name, request, reply),
                request_deserializer=request.FromString,
                response_serializer=reply.SerializeToString,
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                _unary(edge, method.name, request, reply),
                request_deserializer=request.FromString,
                response_serializer=reply.SerializeToString,
            )
    return grpc.method_handlers_generic_handler(SERVICE.full_name, handlers)
