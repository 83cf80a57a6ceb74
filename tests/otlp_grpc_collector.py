"""An OTLP/gRPC trace receiver on 127.0.0.1: the collector service of opentelemetry-proto,
keeping every export request it is sent (what a real collector would receive)."""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class GrpcCollector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)  # type: ignore[no-untyped-call]
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        with self._lock:
            self._requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def start(self) -> GrpcCollector:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(grace=None)

    def spans(self) -> list[tuple[dict[str, str], Any]]:
        """(resource attributes, span) of every span received."""
        found = []
        with self._lock:
            requests = list(self._requests)
        for request in requests:
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    found += [(resource, s) for s in scope_spans.spans]
        return found
