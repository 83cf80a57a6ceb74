"""Server-sent events: a task stream (``service/streams.py``) written in a binding's event
shape. Each event carries its log id as the SSE ``id``, which a client sends back as
``Last-Event-ID`` to resume; idle streams get a comment line as keep-alive. Plain Starlette
streaming: the framing is a few lines, and the reader already paces itself on the socket
(uvicorn's flow control holds a send while the client's buffer is full; a large event goes
out in pieces, so what waits for a slow client is bounded by the piece, not the event).

Shapes:
- 0.3 JSON (JSON-RPC, the gateway's REST): the Task, ``status-update`` events with
  ``final``, ``artifact-update`` events with ``append`` and ``lastChunk``, each with ``kind``.
- 0.3 proto-JSON (the 0.3 REST binding) and 1.0: ``StreamResponse`` wrappers (``task``,
  ``statusUpdate``, ``artifactUpdate``); 0.3's status updates keep ``final``, 1.0's have none.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.responses import StreamingResponse

from gateway.canonical import artifact_update_json, status_update_json, task_json
from gateway.dialects import (
    V03_PROTO,
    V1,
    Dialect,
    artifact_update_out,
    status_update_out,
    task_out,
)
from gateway.errors import GatewayError
from gateway.models import StatusUpdate, Task
from gateway.service.streams import StreamEvent, TaskStream

__all__ = ["Shape", "event_v03", "event_v03_proto", "event_v1", "sse_one", "sse_response"]

log = logging.getLogger("gateway.http")

Shape = Callable[[StreamEvent], Any]  # a value for orjson.dumps
_KEEPALIVE = b": keep-alive\n\n"
# A large event is written in pieces of this size, each once the client has taken the
# last (the server's flow control): a slow client's socket buffer holds one piece, not the
# whole event.
_PIECE = 64 * 1024
# Events carry a patient's data: no cache keeps them (no-store, as every other answer), and
# no proxy holds them back to buffer.
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


def event_v03(event: StreamEvent) -> Any:
    """The event in 0.3 JSON (``kind``-tagged)."""
    data = event.data
    if isinstance(data, Task):
        return task_json(data)
    if isinstance(data, StatusUpdate):
        return status_update_json(event.task_id, event.context_id, data, event.final)
    return artifact_update_json(event.task_id, event.context_id, data)


def _proto(event: StreamEvent, dialect: Dialect) -> dict[str, Any]:
    data = event.data
    if isinstance(data, Task):
        return {"task": task_out(data, dialect)}
    if isinstance(data, StatusUpdate):
        return status_update_out(event.task_id, event.context_id, data, event.final, dialect)
    return artifact_update_out(event.task_id, event.context_id, data, dialect)


def event_v03_proto(event: StreamEvent) -> dict[str, Any]:
    """The event as a 0.3 proto-JSON ``StreamResponse``."""
    return _proto(event, V03_PROTO)


def event_v1(event: StreamEvent) -> dict[str, Any]:
    """The event as a 1.0 ``StreamResponse``."""
    return _proto(event, V1)


async def _frames(
    stream: TaskStream,
    shape: Shape,
    wrap: Callable[[Any], Any],
    failure: Callable[[GatewayError], dict[str, Any]] | None,
) -> AsyncIterator[bytes]:
    try:
        async for event in stream:
            if event is None:
                yield _KEEPALIVE
                continue
            frame = b"id: %b\ndata: %b\n\n" % (event.id.encode(), orjson.dumps(wrap(shape(event))))
            for start in range(0, len(frame), _PIECE):
                yield frame[start : start + _PIECE]
    except GatewayError as exc:  # mid-stream (the store went away): a clear end
        log.warning("stream ended by an error", extra={"error": exc.name})
        if failure is not None:
            yield b"data: " + orjson.dumps(failure(exc)) + b"\n\n"
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            await close()


def sse_response(
    stream: TaskStream,
    shape: Shape,
    wrap: Callable[[Any], Any] = lambda payload: payload,
    failure: Callable[[GatewayError], dict[str, Any]] | None = None,
) -> StreamingResponse:
    """The stream as ``text/event-stream``; ``wrap`` puts each shaped event in its envelope
    (a JSON-RPC response), ``failure`` renders an error that ends the stream early."""
    return StreamingResponse(
        _frames(stream, shape, wrap, failure), media_type="text/event-stream", headers=_HEADERS
    )


def sse_one(payload: dict[str, Any]) -> StreamingResponse:
    """A stream of one event without an id (a JSON-RPC refusal), then its end."""

    async def frame() -> AsyncIterator[bytes]:
        yield b"data: " + orjson.dumps(payload) + b"\n\n"

    return StreamingResponse(frame(), media_type="text/event-stream", headers=_HEADERS)
