"""The gateway's tracer provider, its own rather than OpenTelemetry's global one: installed
with a span processor (``configure``: a batching OTLP exporter, as ``trace_export.plan``
says), shut down, and ``state`` None while tracing is off.

Which spans may start a trace is the ``Roots`` sampler's to say (under ``ParentBased``: a
sampled parent is always followed)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from gateway.trace_export import plan

if TYPE_CHECKING:
    from gateway.settings import Settings

__all__ = ["SCOPE", "State", "configure", "enabled", "install", "shutdown", "state"]

SCOPE = "gateway"


@dataclass
class State:
    """Tracing while on: the provider, the gateway's tracer and the share of new traces."""

    provider: TracerProvider
    tracer: trace.Tracer
    ratio: float


# None while tracing is off: every span of the gateway is then a no-op.
state: State | None = None


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
        attributes: Mapping[str, AttributeValue] | None = None,
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


def install(processor: SpanProcessor, *, sample_ratio: float = 1.0) -> TracerProvider:
    """Trace from now on, handing finished spans to ``processor`` (``configure`` passes a
    batching OTLP exporter). Apps and workers built afterwards are instrumented."""
    global state
    shutdown()
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "gateway"}))
    provider = TracerProvider(resource=resource, sampler=ParentBased(root=_Roots(sample_ratio)))
    provider.add_span_processor(processor)
    state = State(provider, provider.get_tracer(SCOPE), sample_ratio)
    return provider


def configure(settings: Settings) -> bool:
    """Trace as ``trace_export.plan`` says (once per process); whether tracing is on."""
    if state is not None:
        return True
    export = plan(os.environ, settings.otlp_endpoint, settings.trace_sample_ratio)
    if export is None:
        return False
    install(BatchSpanProcessor(export.span_exporter()), sample_ratio=export.ratio)
    return True


def shutdown() -> None:
    """Stop tracing: flush what is buffered; apps built afterwards are not instrumented."""
    global state
    if state is not None:
        current, state = state, None
        current.provider.shutdown()


def enabled() -> bool:
    return state is not None
