"""The gateway's own spans: a send's, a run's, a job's taken from a stream, a call's beside
the HTTP middleware, and what is added to the current one (attributes, events, a failure by
type). Each is a no-op while tracing is off.

The context crosses Redis as a W3C ``traceparent`` (``traceparent()`` writes the current
one; a job's span is a child of the one it carries). Runs and sends are described through
Protocols (``RunIds``, ``SendIds``), not the engine's ``RunJob`` or the run hand-off's
``SendResult``."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway.tracing import provider

__all__ = [
    "Attributes",
    "MessageIds",
    "RunIds",
    "SendIds",
    "annotate",
    "call_span",
    "event",
    "failed",
    "job_span",
    "run_span",
    "sent",
    "span",
    "traceparent",
]


class MessageIds(Protocol):
    """Where a message stands: its context, its task and its place in the context."""

    @property
    def context_id(self) -> str: ...
    @property
    def task_id(self) -> str: ...
    @property
    def seq(self) -> int: ...


class RunIds(MessageIds, Protocol):
    """What a run's span records of it (the engine's ``RunJob``)."""

    @property
    def tenant(self) -> str: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def attempt(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def inputs(self) -> object | None: ...
    @property
    def entry(self) -> str: ...
    @property
    def trace(self) -> str: ...


class SendIds(MessageIds, Protocol):
    """What a send's span records of the accepted message (the run hand-off's ``SendResult``)."""

    @property
    def duplicate(self) -> bool: ...
    @property
    def waiting(self) -> bool: ...


Attributes = Mapping[str, AttributeValue]

_W3C = TraceContextTextMapPropagator()
_NOOP: contextlib.nullcontext[trace.Span] = contextlib.nullcontext(trace.INVALID_SPAN)


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    context: Context | None = None,
    links: Iterable[Link] = (),
    kind: SpanKind = SpanKind.INTERNAL,
) -> contextlib.AbstractContextManager[trace.Span]:
    """A span of the gateway, current inside the block (a no-op when tracing is off).
    Exceptions are recorded by type only: their messages may quote content."""
    if provider.state is None:
        return _NOOP
    return provider.state.tracer.start_as_current_span(
        name,
        context=context,
        kind=kind,
        attributes=attributes,
        links=list(links),
        record_exception=False,
        set_status_on_exception=False,
    )


def call_span(
    name: str, attributes: Attributes, traceparent: str
) -> contextlib.AbstractContextManager[trace.Span]:
    """The span of a call received beside the HTTP middleware (the gRPC binding): a child
    of the caller's ``traceparent``; without one, a root sampled at the configured ratio
    (one left out runs under a context marked not sampled, as a request's does)."""
    if provider.state is None:
        return _NOOP
    if not traceparent and provider.state.ratio < 1.0 and random.random() >= provider.state.ratio:
        ids = RandomIdGenerator()
        context = trace.SpanContext(ids.generate_trace_id(), ids.generate_span_id(), False)
        return trace.use_span(trace.NonRecordingSpan(context), end_on_exit=False)
    return span(name, attributes, context=_context(traceparent), kind=SpanKind.SERVER)


def traceparent() -> str:
    """The current span as a W3C ``traceparent`` ('' when tracing is off or no span is)."""
    if provider.state is None:
        return ""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return carrier.get("traceparent", "")


def _context(tp: str) -> Context:
    """The context a stored ``traceparent`` names (an empty one, so a root, without it)."""
    return _W3C.extract({"traceparent": tp}) if tp else Context()


def _links(tps: Iterable[str]) -> list[Link]:
    links = []
    for tp in tps:
        linked = trace.get_current_span(_context(tp)).get_span_context()
        if linked.is_valid:
            links.append(Link(linked))
    return links


@contextlib.contextmanager
def job_span(
    name: str, tps: Iterable[str], attributes: Attributes | None = None
) -> Iterator[trace.Span]:
    """The span of work taken from a job stream: a child of the first job's stored
    context, linked to the others' (a batch serves several sends)."""
    if provider.state is None:
        yield trace.INVALID_SPAN
        return
    first, *others = list(tps) or [""]
    with span(
        name,
        attributes,
        context=_context(first),
        links=_links(dict.fromkeys(t for t in others if t and t != first)),
        kind=SpanKind.CONSUMER,
    ) as current:
        yield current


def _message(agent_id: str, ids: MessageIds) -> dict[str, AttributeValue]:
    """The attributes naming a message and the agent it is for (on sends and runs alike)."""
    return {
        "gateway.agent.id": agent_id,
        "gateway.context.id": ids.context_id,
        "gateway.task.id": ids.task_id,
        "gateway.message.seq": ids.seq,
    }


def run_span(job: RunIds) -> contextlib.AbstractContextManager[trace.Span]:
    """The span of one run, a child of the send that queued it (on any replica)."""
    if provider.state is None:
        return _NOOP
    attributes: dict[str, AttributeValue] = {
        "gateway.tenant": job.tenant,
        **_message(job.agent_id, job),
        "gateway.run.attempt": job.attempt,
        "gateway.run.attempts": job.attempts,
        "gateway.run.inputs_handed_over": job.inputs is not None,
    }
    if job.entry:
        attributes["messaging.system"] = "redis"
        attributes["messaging.message.id"] = job.entry
        with contextlib.suppress(ValueError):
            queued_ms = int(job.entry.split("-", 1)[0])
            attributes["gateway.job.queued_at_ms"] = queued_ms
    return span("gateway.run", attributes, context=_context(job.trace), kind=SpanKind.CONSUMER)


def sent(agent_id: str, result: SendIds) -> None:
    """Describe the accepted message on the request's span."""
    if provider.state is None:
        return
    trace.get_current_span().set_attributes(
        {
            **_message(agent_id, result),
            "gateway.send.duplicate": result.duplicate,
            "gateway.send.waiting": result.waiting,
        }
    )


def annotate(attributes: Attributes) -> None:
    """Add attributes to the current span (nothing when tracing is off)."""
    if provider.state is not None:
        trace.get_current_span().set_attributes(attributes)


def event(name: str, attributes: Attributes | None = None) -> None:
    """Add an event to the current span (nothing when tracing is off)."""
    if provider.state is not None:
        trace.get_current_span().add_event(name, attributes)


def failed(error: BaseException, current: trace.Span | None = None) -> None:
    """Mark the span failed, naming the exception's type (never its message)."""
    if provider.state is None:
        return
    target = current or trace.get_current_span()
    target.set_status(Status(StatusCode.ERROR))
    target.set_attribute("error.type", type(error).__qualname__)
