"""Tracing: one OpenTelemetry trace per send, from the HTTP request to its run on whichever
replica takes the job, and on into recall, the agent's outbound calls, the outbox and the
indexer.

Off unless an exporter is configured (``trace_export.py``: ``GATEWAY_OTLP_ENDPOINT`` or the
standard ``OTEL_*`` variables): then spans go out in batches over OTLP (HTTP or gRPC).
Off, nothing is instrumented and the gateway's own spans are no-ops: the hot path pays a
few attribute look-ups.

The context crosses Redis as a W3C ``traceparent`` in the job's JSON (``tp``): the run,
embedding and outbox jobs each carry the one of the span that queued them, and their
worker starts its span as a child of it. A batch that serves several sends is a child of
the first and links the others.

What is recorded: the gateway's spans (ids, sizes, states, timings), the ASGI server span
(without the query string), redis commands (the command name and, for scripts, which
one: never arguments, which hold messages) and HTTP client spans (URL without the query
string), whose ``traceparent`` header carries the trace to remote agents, model servers,
the embedder and Cortadel. The provider is the gateway's own, not OpenTelemetry's global
one: libraries that trace by themselves (the a2a SDK, Cortadel's Kiota client) stay
no-ops, since their spans may hold exception messages with a remote's text. Root spans of
client calls (workers polling Redis, maintenance) are not sampled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway.trace_export import plan

if TYPE_CHECKING:
    from gateway.settings import Settings


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
    """What a send's span records of the accepted message (the store's ``SendResult``)."""

    @property
    def duplicate(self) -> bool: ...
    @property
    def waiting(self) -> bool: ...


__all__ = [
    "TracingMiddleware",
    "annotate",
    "call_span",
    "configure",
    "enabled",
    "event",
    "failed",
    "install",
    "instrument_http",
    "instrument_redis",
    "job_span",
    "middleware",
    "run_span",
    "sent",
    "shutdown",
    "span",
    "traceparent",
]

Attributes = Mapping[str, AttributeValue]

# Requests that are not traced: scrapes and probes.
UNTRACED_PATHS = frozenset({"/metrics", "/healthz", "/readyz"})
SCOPE = "gateway"
_W3C = TraceContextTextMapPropagator()
_NOOP: contextlib.nullcontext[trace.Span] = contextlib.nullcontext(trace.INVALID_SPAN)


@dataclass
class _State:
    provider: TracerProvider
    tracer: trace.Tracer
    ratio: float


_state: _State | None = None


class _Roots(Sampler):
    """Which spans may start a trace: jobs with no stored context at ``ratio``; requests
    always (``TracingMiddleware`` has sampled them already); never a client call with no
    parent (a worker's poll of Redis, a maintenance sweep), which would otherwise start a
    trace of its own several times a second."""

    def __init__(self, ratio: float) -> None:
        self._ratio = TraceIdRatioBased(ratio)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes | None = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        if kind == SpanKind.CLIENT:
            return SamplingResult(Decision.DROP)
        if kind == SpanKind.SERVER:
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)
        return self._ratio.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return f"GatewayRoots{{{self._ratio.get_description()}}}"


# -- set-up --------------------------------------------------------------------------------


def install(processor: SpanProcessor, *, sample_ratio: float = 1.0) -> TracerProvider:
    """Trace from now on, handing finished spans to ``processor`` (``configure`` passes a
    batching OTLP exporter). Apps and workers built afterwards are instrumented."""
    global _state
    shutdown()
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "gateway"}))
    provider = TracerProvider(resource=resource, sampler=ParentBased(root=_Roots(sample_ratio)))
    provider.add_span_processor(processor)
    _state = _State(provider, provider.get_tracer(SCOPE), sample_ratio)
    return provider


def configure(settings: Settings) -> bool:
    """Trace as ``trace_export.plan`` says (once per process); whether tracing is on."""
    if _state is not None:
        return True
    export = plan(os.environ, settings.otlp_endpoint, settings.trace_sample_ratio)
    if export is None:
        return False
    install(BatchSpanProcessor(export.span_exporter()), sample_ratio=export.ratio)
    return True


def shutdown() -> None:
    """Stop tracing: flush what is buffered; apps built afterwards are not instrumented."""
    global _state
    if _state is not None:
        state, _state = _state, None
        state.provider.shutdown()


def enabled() -> bool:
    return _state is not None


# -- the gateway's own spans ---------------------------------------------------------------


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
    if _state is None:
        return _NOOP
    return _state.tracer.start_as_current_span(
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
    if _state is None:
        return _NOOP
    if not traceparent and _state.ratio < 1.0 and random.random() >= _state.ratio:
        ids = RandomIdGenerator()
        context = trace.SpanContext(ids.generate_trace_id(), ids.generate_span_id(), False)
        return trace.use_span(trace.NonRecordingSpan(context), end_on_exit=False)
    return span(name, attributes, context=_context(traceparent), kind=SpanKind.SERVER)


def traceparent() -> str:
    """The current span as a W3C ``traceparent`` ('' when tracing is off or no span is)."""
    if _state is None:
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
    if _state is None:
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
    if _state is None:
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
    if _state is None:
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
    if _state is not None:
        trace.get_current_span().set_attributes(attributes)


def event(name: str, attributes: Attributes | None = None) -> None:
    """Add an event to the current span (nothing when tracing is off)."""
    if _state is not None:
        trace.get_current_span().add_event(name, attributes)


def failed(error: BaseException, current: trace.Span | None = None) -> None:
    """Mark the span failed, naming the exception's type (never its message)."""
    if _state is None:
        return
    target = current or trace.get_current_span()
    target.set_status(Status(StatusCode.ERROR))
    target.set_attribute("error.type", type(error).__qualname__)


# -- instrumentation -----------------------------------------------------------------------


_STATEMENTS = ("db.statement", "db.query.text")


def _attributes_of(span: trace.Span) -> Mapping[str, Any]:
    return getattr(span, "attributes", None) or {}


class _ScriptNames:
    """Names the gateway's scripts on the spans of the EVALSHAs that run them: ``EVALSHA
    send`` rather than a digest. The instrumentation's statement already replaces every
    argument by ``?`` (the tests hold it to that: arguments are message JSON)."""

    def __init__(self, scripts: object | None) -> None:
        self.names: dict[str, str] = {}
        if scripts is not None and dataclasses.is_dataclass(scripts):
            for field in dataclasses.fields(scripts):
                self.names[getattr(scripts, field.name).sha] = field.name

    def __call__(self, current: trace.Span, _: Any, args: Any, __: Any) -> None:
        if len(args) < 2 or args[0] != "EVALSHA" or not current.is_recording():
            return
        script = self.names.get(args[1])
        if script:
            command = f"EVALSHA {script}"
            current.update_name(command)
            current.set_attribute("gateway.script", script)
            attributes = _attributes_of(current)
            for key in _STATEMENTS:
                if key in attributes:
                    current.set_attribute(key, command)


def instrument_redis(client: Any, scripts: object | None = None) -> None:
    """Trace ``client``'s commands: their names, never their arguments (message JSON).
    ``scripts``: a dataclass of registered scripts, named on the spans that run them."""
    if _state is None:
        return
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    RedisInstrumentor.instrument_client(
        client, tracer_provider=_state.provider, request_hook=_ScriptNames(scripts)
    )


_URL_KEYS = ("http.url", "url.full")


async def _without_query(current: trace.Span, request: Any) -> None:
    """An outbound span's URL without its query string (it may carry a user id or text)."""
    if not current.is_recording():
        return
    url = str(request.url)
    if "?" not in url:
        return
    bare = url.split("?", 1)[0]
    for key in _URL_KEYS:
        if key in _attributes_of(current):
            current.set_attribute(key, bare)


def instrument_http(*clients: Any) -> None:
    """Trace requests of ``httpx`` or ``httpx2`` async clients: a client span each, and a
    ``traceparent`` header that carries the trace to the server."""
    if _state is None:
        return
    import httpx2
    from opentelemetry.instrumentation.httpx import (
        HTTPX2ClientInstrumentor,
        HTTPXClientInstrumentor,
    )

    for client in clients:
        instrumentor = (
            HTTPX2ClientInstrumentor
            if isinstance(client, httpx2.AsyncClient)
            else HTTPXClientInstrumentor
        )
        instrumentor.instrument_client(
            client, tracer_provider=_state.provider, request_hook=_without_query
        )


# -- HTTP ----------------------------------------------------------------------------------

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_REQUEST = "gateway.tracing"


@dataclass
class _Request:
    scope: Scope
    error: BaseException | None = None


def _span_details(scope: Scope) -> tuple[str, dict[str, Any]]:
    """A request's span is named by its method until routing names the route."""
    return str(scope.get("method") or "HTTP"), {}


def _name_by_operations(current: trace.Span, operations: Any) -> None:
    """A JSON-RPC request's span is named by its method, as OpenTelemetry's RPC conventions
    say (``rpc.system``, ``rpc.method``); every operation's A2A outcome is recorded (``ok``
    or the error's name, which JSON-RPC wraps in HTTP 200) and a failure's as ``error.type``."""
    rpc = [o for o in operations if o.binding != "rest"]
    if rpc:
        methods = sorted({o.name for o in rpc})
        current.update_name(methods[0] if len(methods) == 1 else f"{rpc[0].binding} batch")
        current.set_attribute("rpc.system", rpc[0].binding)
        current.set_attribute("rpc.method", ",".join(methods))
        if rpc[0].binding == "jsonrpc":
            current.set_attribute("rpc.jsonrpc.version", "2.0")
    outcomes = [o.outcome for o in operations]
    if outcomes:
        current.set_attribute("a2a.outcome", ",".join(outcomes))
        failed = [o for o in outcomes if o != "ok"]
        if failed:
            current.set_attribute("error.type", failed[0])


class TracingMiddleware:
    """OpenTelemetry's ASGI middleware around the app, except for /metrics and the probes.
    The span never sees the query string; it is named after the route's template (ids stay
    out of the name) and carries the request id. An unexpected exception is recorded by
    type, not message.

    A request that brings no ``traceparent`` is sampled here, at the configured ratio,
    before OpenTelemetry's middleware does any work: one left out runs under a context
    marked not sampled, so its jobs and outbound calls carry that decision on."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        assert _state is not None, "tracing is on"
        self.app, self._ratio = app, _state.ratio
        self._ids = RandomIdGenerator()
        self._traced = OpenTelemetryMiddleware(
            self._inner,
            default_span_details=_span_details,
            tracer_provider=_state.provider,
            exclude_spans=["receive", "send"],
        )

    def _left_out(self, scope: Scope) -> bool:
        if self._ratio >= 1.0 or any(name == b"traceparent" for name, _ in scope["headers"]):
            return False
        return random.random() >= self._ratio

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        if self._left_out(scope):
            unsampled = trace.NonRecordingSpan(
                trace.SpanContext(
                    self._ids.generate_trace_id(), self._ids.generate_span_id(), is_remote=False
                )
            )
            token = otel_context.attach(trace.set_span_in_context(unsampled))
            try:
                await self.app(scope, receive, send)
            finally:
                otel_context.detach(token)
            return
        request = _Request(scope)
        await self._traced({**scope, "query_string": b"", _REQUEST: request}, receive, send)
        if request.error is not None:
            raise request.error

    async def _inner(self, traced: Scope, receive: Receive, send: Send) -> None:
        request: _Request = traced[_REQUEST]
        scope, current = request.scope, trace.get_current_span()

        def name_by_route() -> None:
            route = getattr(scope.get("route"), "path_format", None)
            if isinstance(route, str):
                current.update_name(f"{scope.get('method', 'HTTP')} {route}")
                current.set_attribute("http.route", route)
            _name_by_operations(current, scope.get("state", {}).get("operations", ()))

        async def send_noting(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":  # routed; the span ends with the body
                name_by_route()
                for name, value in message.get("headers") or ():
                    if name == b"x-request-id":
                        current.set_attribute("gateway.request_id", value.decode("latin-1"))
            await send(message)

        try:
            await self.app(scope, receive, send_noting)
        except Exception as exc:  # re-raised outside OpenTelemetry's span, which would
            name_by_route()  # record its message
            failed(exc, current)
            request.error = exc


def middleware() -> list[Any]:
    """The tracing middleware (outermost), when tracing is on."""
    if _state is None:
        return []
    from starlette.middleware import Middleware

    return [Middleware(TracingMiddleware)]
