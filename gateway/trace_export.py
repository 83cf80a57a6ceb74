"""Where spans go: the gateway's settings and the standard OpenTelemetry variables, read
into one plan that configuration checks, the start-up line states and tracing follows.

Tracing is on when an endpoint is configured (``GATEWAY_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``) or
``OTEL_TRACES_EXPORTER`` names an exporter; ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` turns it off. Exporters: ``otlp`` over ``http/protobuf`` (the
default) or ``grpc`` (``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``), and ``console``. The
sampler: ``OTEL_TRACES_SAMPLER`` (``always_on``, ``always_off``, ``traceidratio`` and
their ``parentbased_`` forms, with ``OTEL_TRACES_SAMPLER_ARG``) sets the share of new
traces unless ``GATEWAY_TRACE_SAMPLE_RATIO`` is set; a caller's sampled ``traceparent`` is
always followed. ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the service
(``gateway`` by default); ``OTEL_EXPORTER_OTLP_HEADERS``, ``_TIMEOUT``, ``_COMPRESSION`` and
``_CERTIFICATE`` are read by the exporters themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["ExportPlan", "TraceExportError", "plan"]

_PROTOCOLS = ("http/protobuf", "grpc")
_EXPORTERS = ("otlp", "console", "none")
_SAMPLERS = {
    "always_on": 1.0,
    "always_off": 0.0,
    "traceidratio": None,
    "parentbased_always_on": 1.0,
    "parentbased_always_off": 0.0,
    "parentbased_traceidratio": None,
}
_DEFAULT_ENDPOINTS = {"http/protobuf": "http://localhost:4318", "grpc": "http://localhost:4317"}


class TraceExportError(ValueError):
    """An OpenTelemetry variable the gateway cannot follow (the message names it)."""


@dataclass(frozen=True)
class ExportPlan:
    exporter: str  # "otlp" | "console"
    protocol: str | None  # OTLP's: "http/protobuf" | "grpc"
    endpoint: str | None  # where OTLP spans go (the full URL for http/protobuf)
    ratio: float  # the share of new traces sampled

    def describe(self) -> dict[str, object]:
        """For the start-up line (an endpoint without credentials: the caller shows it)."""
        out: dict[str, object] = {"exporter": self.exporter, "sample_ratio": self.ratio}
        if self.exporter == "otlp":
            out.update(protocol=self.protocol, endpoint=self.endpoint)
        return out

    def span_exporter(self) -> SpanExporter:
        if self.exporter == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            return ConsoleSpanExporter()
        if self.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )

            return GrpcExporter(endpoint=self.endpoint)
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=self.endpoint)


def _get(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()


def _exporter(environ: Mapping[str, str]) -> str | None:
    raw = _get(environ, "OTEL_TRACES_EXPORTER").lower()
    if not raw:
        return None
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in _EXPORTERS]
    if unknown or len(names) != 1:
        raise TraceExportError(
            "OTEL_TRACES_EXPORTER: one of otlp, console or none (the gateway exports to one)"
        )
    return names[0]


def _protocol(environ: Mapping[str, str]) -> str:
    name = next(
        (
            n
            for n in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
            if _get(environ, n)
        ),
        None,
    )
    if name is None:
        return "http/protobuf"
    value = _get(environ, name).lower()
    if value not in _PROTOCOLS:
        raise TraceExportError(f"{name}: one of {', '.join(_PROTOCOLS)}")
    return value


def _endpoint(environ: Mapping[str, str], configured: str | None, protocol: str) -> str | None:
    """The OTLP endpoint: a base URL gets the signal's path over HTTP, as the spec says."""
    traces = _get(environ, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    base = configured or _get(environ, "OTEL_EXPORTER_OTLP_ENDPOINT")
    if not configured and traces:
        return traces
    if not base:
        return None
    if protocol == "grpc":
        return base
    return f"{base.rstrip('/')}/v1/traces"


def _ratio(environ: Mapping[str, str], configured: float | None) -> float:
    if configured is not None:
        return configured
    sampler = _get(environ, "OTEL_TRACES_SAMPLER").lower()
    if not sampler:
        return 1.0
    if sampler not in _SAMPLERS:
        raise TraceExportError(f"OTEL_TRACES_SAMPLER: one of {', '.join(_SAMPLERS)}")
    fixed = _SAMPLERS[sampler]
    if fixed is not None:
        return fixed
    arg = _get(environ, "OTEL_TRACES_SAMPLER_ARG") or "1.0"
    try:
        ratio = float(arg)
    except ValueError:
        ratio = -1.0
    if not 0.0 <= ratio <= 1.0:
        raise TraceExportError("OTEL_TRACES_SAMPLER_ARG: a number from 0 to 1")
    return ratio


def plan(
    environ: Mapping[str, str], endpoint: str | None, ratio: float | None
) -> ExportPlan | None:
    """How spans are exported, or None when tracing is off. ``endpoint`` and ``ratio`` are
    the gateway's own settings (None: not set). ``TraceExportError`` names a bad variable."""
    exporter = _exporter(environ)
    protocol = _protocol(environ)
    sample = _ratio(environ, ratio)
    if _get(environ, "OTEL_SDK_DISABLED").lower() == "true" or exporter == "none":
        return None
    if exporter == "console":
        return ExportPlan("console", None, None, sample)
    url = _endpoint(environ, endpoint, protocol)
    if url is None and exporter is None:
        return None
    return ExportPlan("otlp", protocol, url or _default(protocol), sample)


def _default(protocol: str) -> str:
    base = _DEFAULT_ENDPOINTS[protocol]
    return base if protocol == "grpc" else f"{base}/v1/traces"
