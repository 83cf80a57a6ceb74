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
client calls (workers polling Redis, maintenance) are not sampled."""

from __future__ import annotations

from gateway.tracing.instrumentation import instrument_http, instrument_redis
from gateway.tracing.middleware import TracingMiddleware, middleware
from gateway.tracing.provider import configure, enabled, install, shutdown
from gateway.tracing.spans import (
    Attributes,
    annotate,
    call_span,
    event,
    failed,
    job_span,
    run_span,
    sent,
    span,
    traceparent,
)

__all__ = [
    "Attributes",
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
