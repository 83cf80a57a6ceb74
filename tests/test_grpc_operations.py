"""The gRPC binding's operations: rate limits as RESOURCE_EXHAUSTED with retry info,
health and reflection, TLS, and a call traced as a child of its caller's traceparent."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import grpc
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gateway.embedded_redis import free_port
from gateway.grpcapi.proto import a2a_pb2 as pb
from tests.conftest import API_KEYS
from tests.grpc_gateway import Served, call, refusal, send_request
from tests.grpc_gateway import served as served
from tests.processes import serving, slow_process_test

pytestmark = slow_process_test


def test_rate_limits_are_resource_exhausted_with_retry_info(served: Served) -> None:
    request = pb.ListTasksRequest()
    answers: list[Any] = []
    for _ in range(5):
        try:
            call(served, "ListTasks", request, pb.ListTasksResponse, "key-carol")
            answers.append("ok")
        except grpc.RpcError as exc:
            answers.append(refusal(exc))
    # carol's tenant allows her 3 calls an hour (another test of this module makes one)
    refusals = [a for a in answers if a != "ok"]
    assert answers[0] == "ok" and len(refusals) >= 2
    code, details = refusals[0]
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details["ErrorInfo"]["reason"] == "RATE_LIMITED"
    assert int(details["RetryInfo"]["retryDelay"].rstrip("s")) > 0


def test_health_and_reflection(served: Served) -> None:
    health = health_pb2_grpc.HealthStub(served.channel)
    for name in ("", "lf.a2a.v1.A2AService"):
        answer = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=30)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(served.channel)
    asked = reflection_pb2.ServerReflectionRequest(list_services="")
    (answer,) = list(reflection.ServerReflectionInfo(iter([asked]), timeout=30))
    names = {s.name for s in answer.list_services_response.service}
    assert {"lf.a2a.v1.A2AService", "grpc.health.v1.Health"} <= names


def test_tls(tmp_path: Path) -> None:
    """With a certificate and key, the port speaks TLS (and only TLS)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "cert.pem").write_bytes(pem)
    (tmp_path / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    port = free_port()
    with serving(
        tmp_path,
        GATEWAY_API_KEYS=orjson.dumps(API_KEYS).decode(),
        GATEWAY_GRPC_PORT=str(port),
        GATEWAY_GRPC_TLS_CERT=str(tmp_path / "cert.pem"),
        GATEWAY_GRPC_TLS_KEY=str(tmp_path / "key.pem"),
    ):
        credentials = grpc.ssl_channel_credentials(root_certificates=pem)
        options = [("grpc.ssl_target_name_override", "localhost")]
        with grpc.secure_channel(f"127.0.0.1:{port}", credentials, options) as channel:
            tls = Served("", "", channel)
            listed = call(tls, "ListTasks", pb.ListTasksRequest(), pb.ListTasksResponse)
            assert listed.page_size == 50
        log = next(tmp_path.glob("serve-*.log")).read_text()
        assert f'"event":"grpc serving","port":{port},"tls":true' in log
        with grpc.insecure_channel(f"127.0.0.1:{port}") as plain:
            with pytest.raises(grpc.RpcError) as caught:
                call(
                    Served("", "", plain), "ListTasks", pb.ListTasksRequest(), pb.ListTasksResponse
                )
            code = cast(grpc.Call, caught.value).code()
            assert code == grpc.StatusCode.UNAVAILABLE


def test_a_call_is_traced_as_a_child_of_its_callers_traceparent(tmp_path: Path) -> None:
    from tests.otlp_grpc_collector import GrpcCollector
    from tests.waiting import until_sync

    collector = GrpcCollector().start()
    port = free_port()
    trace_id, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        env = {
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.port}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "GATEWAY_GRPC_PORT": str(port),
        }
        with serving(tmp_path, **env), grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            traced = Served("", "", channel)
            metadata = {"traceparent": f"00-{trace_id}-{parent}-01"}
            call(traced, "SendMessage", send_request(), pb.SendMessageResponse, None, **metadata)
            name = "lf.a2a.v1.A2AService/SendMessage"

            def exported() -> Any:
                return [s for _, s in collector.spans() if s.name == name]

            (span,) = until_sync(exported, what="the call's span")
            assert span.trace_id.hex() == trace_id and span.parent_span_id.hex() == parent
            # The run it started is in the same trace.
            until_sync(
                lambda: any(
                    s.name == "gateway.run" and s.trace_id.hex() == trace_id
                    for _, s in collector.spans()
                ),
                what="the run's span in the call's trace",
            )
    finally:
        collector.stop()
