"""The gRPC binding (``A2AService`` of the A2A 1.0 proto) of a served gateway, driven with
grpcio directly: the same tasks, principals, errors, limits, audit and metrics as the other
bindings. The official 1.x client over gRPC is in ``test_client_sdk1x.py``."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc
import httpx
import orjson
import pytest
from google.protobuf import empty_pb2
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from gateway.embedded_redis import free_port
from gateway.grpcapi.proto import a2a_pb2 as pb
from tests.conftest import API_KEYS
from tests.processes import serving, slow_process_test

pytestmark = slow_process_test
SERVICE = "/lf.a2a.v1.A2AService/"
VITALS = {"patient": {"name": "Zoë Ångström 患者", "age": 72}, "flags": [True, None]}


@dataclass
class Served:
    base: str
    grpc: str
    channel: Any  # a grpc channel


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    port = free_port()
    with (
        serving(
            tmp_path_factory.mktemp("grpc"),
            GATEWAY_API_KEYS=orjson.dumps(API_KEYS).decode(),
            GATEWAY_GRPC_PORT=str(port),
            GATEWAY_PUSH_ALLOWLIST="127.0.0.1",
            GATEWAY_RATE_LIMIT_TENANTS='{"t2": {"user": "3/3600"}}',
        ) as (_, base),
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        grpc.channel_ready_future(channel).result(timeout=60)
        yield Served(base, f"127.0.0.1:{port}", channel)


def call(
    served: Served,
    method: str,
    request: Message,
    reply: type[Message],
    key: str | None = "key-alice",
    **metadata: str,
) -> Any:
    stub = served.channel.unary_unary(
        SERVICE + method,
        request_serializer=request.SerializeToString,
        response_deserializer=reply.FromString,
    )
    pairs = [*([("authorization", f"Bearer {key}")] if key else []), *metadata.items()]
    return stub(request, metadata=pairs, timeout=60)


def stream(served: Served, method: str, request: Message, key: str = "key-alice") -> list[Any]:
    stub = served.channel.unary_stream(
        SERVICE + method,
        request_serializer=request.SerializeToString,
        response_deserializer=pb.StreamResponse.FromString,
    )
    events = stub(request, metadata=[("authorization", f"Bearer {key}")], timeout=60)
    return [MessageToDict(e) for e in events]


def send_request(
    *parts: dict[str, Any], metadata: dict[str, Any] | None = None, **fields: Any
) -> pb.SendMessageRequest:
    """``metadata``: the message's (the echo agent's instructions)."""
    message = {
        "role": "ROLE_USER",
        "messageId": str(uuid.uuid4()),
        "parts": list(parts) or [{"text": "hello"}],
        **({"metadata": metadata} if metadata else {}),
    }
    body = {"message": message, **fields}
    return ParseDict(body, pb.SendMessageRequest())


def send(served: Served, *parts: dict[str, Any], key: str = "key-alice", **fields: Any) -> Any:
    reply = call(served, "SendMessage", send_request(*parts, **fields), pb.SendMessageResponse, key)
    return MessageToDict(reply)["task"]


def refusal(exc: grpc.RpcError) -> tuple[grpc.StatusCode, dict[str, Any]]:
    """The status code and the ``google.rpc.Status`` details, by type name."""
    failed = cast(grpc.Call, exc)
    trailers: dict[str, Any] = dict(failed.trailing_metadata() or ())
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    details: dict[str, Any] = {}
    for detail in status.details:
        for kind in (
            error_details_pb2.ErrorInfo,
            error_details_pb2.BadRequest,
            error_details_pb2.RetryInfo,
        ):
            if detail.Is(kind.DESCRIPTOR):
                unpacked = kind()
                detail.Unpack(unpacked)
                details[kind.__name__] = MessageToDict(unpacked)
    return failed.code(), details


def refused(served: Served, method: str, request: Message, reply: type[Message], **kw: Any) -> Any:
    with pytest.raises(grpc.RpcError) as caught:
        call(served, method, request, reply, **kw)
    return refusal(caught.value)


def test_a_send_is_read_back_over_grpc_rest_and_json_rpc(served: Served) -> None:
    task = send(served, {"text": "vitals"}, {"data": VITALS})
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert {"data": VITALS} in task["artifacts"][0]["parts"]
    got = MessageToDict(call(served, "GetTask", pb.GetTaskRequest(id=task["id"]), pb.Task))
    assert [m["role"] for m in got["history"]] == ["ROLE_USER", "ROLE_AGENT"]
    assert got["history"][0]["parts"] == [{"text": "vitals"}, {"data": VITALS}]
    one = call(served, "GetTask", pb.GetTaskRequest(id=task["id"], history_length=1), pb.Task)
    assert [m.role for m in one.history] == [pb.ROLE_AGENT]
    headers = {"Authorization": "Bearer key-alice"}
    rest = httpx.get(f"{served.base}/v1/tasks/{task['id']}", headers=headers, timeout=30)
    assert rest.status_code == 200 and rest.json()["status"]["state"] == "completed"
    assert rest.json()["history"][0]["parts"][1] == {"kind": "data", "data": VITALS}
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task["id"]}}
    rpc = httpx.post(served.base + "/", json=body, headers=headers, timeout=30).json()
    assert rpc["result"]["contextId"] == task["contextId"]
    assert rpc["result"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_non_blocking_send_then_list_and_cancel(served: Served) -> None:
    working = send(
        served,
        metadata={"echo": {"finalState": "working"}},
        configuration={"returnImmediately": True},
    )
    assert working["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    context = working["contextId"]
    listed = call(
        served, "ListTasks", pb.ListTasksRequest(context_id=context), pb.ListTasksResponse
    )
    assert [t.id for t in listed.tasks] == [working["id"]] and listed.total_size == 1
    canceled = call(served, "CancelTask", pb.CancelTaskRequest(id=working["id"]), pb.Task)
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    code, details = refused(served, "CancelTask", pb.CancelTaskRequest(id=working["id"]), pb.Task)
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert details["ErrorInfo"]["reason"] == "TASK_NOT_CANCELABLE"
    assert details["ErrorInfo"]["domain"] == "a2a-protocol.org"


def test_a_client_named_context_is_opened_per_user(served: Served) -> None:
    named = "grpc-named-" + uuid.uuid4().hex
    tasks = {}
    for key in ("key-alice", "key-bob"):
        request = send_request()
        request.message.context_id = named
        reply = call(served, "SendMessage", request, pb.SendMessageResponse, key)
        assert reply.task.context_id == named
        tasks[key] = reply.task.id
    for key, own in tasks.items():
        listing = pb.ListTasksRequest(context_id=named)
        listed = call(served, "ListTasks", listing, pb.ListTasksResponse, key)
        assert [t.id for t in listed.tasks] == [own]
    request = send_request()
    request.message.context_id = "not a valid id"
    code, _ = refused(served, "SendMessage", request, pb.SendMessageResponse)
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_unset_and_unknown_enums_are_unspecified(served: Served) -> None:
    """A message without a role is the sender's; an unknown state filters nothing."""
    request = send_request()
    request.message.ClearField("role")
    task = MessageToDict(call(served, "SendMessage", request, pb.SendMessageResponse).task)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    listing = pb.ListTasksRequest(context_id=task["contextId"])
    listing.status = 42  # type: ignore[assignment]  # a newer proto's state
    listed = call(served, "ListTasks", listing, pb.ListTasksResponse)
    assert [t.id for t in listed.tasks] == [task["id"]]


def test_another_users_or_tenants_task_is_not_found(served: Served) -> None:
    task = send(served)
    request = pb.GetTaskRequest(id=task["id"])
    for key in ("key-bob", "key-carol"):
        code, details = refused(served, "GetTask", request, pb.Task, key=key)
        assert code == grpc.StatusCode.NOT_FOUND
        assert details["ErrorInfo"]["reason"] == "TASK_NOT_FOUND"
    # Bob lists none of alice's tasks.
    listed = call(served, "ListTasks", pb.ListTasksRequest(), pb.ListTasksResponse, "key-bob")
    assert task["id"] not in [t.id for t in listed.tasks]


def test_credentials_come_from_metadata(served: Served) -> None:
    request = pb.ListTasksRequest()
    code, details = refused(served, "ListTasks", request, pb.ListTasksResponse, key=None)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert details["ErrorInfo"]["reason"] == "UNAUTHENTICATED"
    code, _ = refused(served, "ListTasks", request, pb.ListTasksResponse, key="key-nobody")
    assert code == grpc.StatusCode.UNAUTHENTICATED
    by_header = call(
        served, "ListTasks", request, pb.ListTasksResponse, None, **{"x-api-key": "key-alice"}
    )
    assert by_header.page_size == 50
    code, details = refused(
        served, "ListTasks", request, pb.ListTasksResponse, **{"tenant-name": "t2"}
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details["ErrorInfo"]["reason"] == "FORBIDDEN"


def test_bad_requests_are_invalid_argument_with_the_fields(served: Served) -> None:
    code, details = refused(
        served, "GetTask", pb.GetTaskRequest(id="x", history_length=-1), pb.Task
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details["ErrorInfo"]["reason"] == "INVALID_PARAMS"
    assert details["BadRequest"]["fieldViolations"][0]["field"] == "historyLength"
    code, details = refused(served, "SendMessage", pb.SendMessageRequest(), pb.SendMessageResponse)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    for version in ("0.3", "2.0"):
        code, details = refused(
            served,
            "ListTasks",
            pb.ListTasksRequest(),
            pb.ListTasksResponse,
            **{"a2a-version": version},
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert details["ErrorInfo"]["reason"] == "VERSION_NOT_SUPPORTED"
    # A request larger than an HTTP body may be (GATEWAY_MAX_BODY_BYTES, 10 MiB) is refused.
    with pytest.raises(grpc.RpcError) as caught:
        call(
            served, "SendMessage", send_request({"text": "x" * (11 << 20)}), pb.SendMessageResponse
        )
    assert cast(grpc.Call, caught.value).code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    code, details = refused(
        served, "GetExtendedAgentCard", pb.GetExtendedAgentCardRequest(), pb.AgentCard
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert details["ErrorInfo"]["reason"] == "EXTENDED_AGENT_CARD_NOT_CONFIGURED"


def test_the_tenant_field_routes_to_an_agent_and_names_the_callers_tenant(
    served: Served,
) -> None:
    card = httpx.get(f"{served.base}/agents/echo/.well-known/agent-card.json", timeout=30).json()
    grpc_interfaces = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    assert grpc_interfaces == [
        {
            "url": served.grpc,
            "protocolBinding": "GRPC",
            "protocolVersion": "1.0",
            "tenant": "agents/echo",
        }
    ]
    default = httpx.get(f"{served.base}/.well-known/agent-card.json", timeout=30).json()
    assert {"url": served.grpc, "protocolBinding": "GRPC", "protocolVersion": "1.0"} in default[
        "supportedInterfaces"
    ]
    for tenant in ("agents/echo", "t1", "agents/echo/t1"):
        assert send(served, tenant=tenant)["status"]["state"] == "TASK_STATE_COMPLETED"
    code, details = refused(
        served, "SendMessage", send_request(tenant="agents/nope"), pb.SendMessageResponse
    )
    assert code == grpc.StatusCode.NOT_FOUND
    assert details["ErrorInfo"]["reason"] == "AGENT_NOT_FOUND"
    code, _ = refused(served, "SendMessage", send_request(tenant="t2"), pb.SendMessageResponse)
    assert code == grpc.StatusCode.NOT_FOUND


def test_streams_and_subscribing(served: Served) -> None:
    chunked = {"echo": {"chunks": 3, "delayMs": 50}}
    events = stream(served, "SendStreamingMessage", send_request({"text": "abc"}, metadata=chunked))
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert any("artifactUpdate" in e for e in events)
    task_id = events[0]["task"]["id"]
    with pytest.raises(grpc.RpcError) as caught:
        stream(served, "SubscribeToTask", pb.SubscribeToTaskRequest(id=task_id))
    code, details = refusal(caught.value)
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert details["ErrorInfo"]["reason"] == "UNSUPPORTED_OPERATION"
    slow = send(
        served,
        {"text": "abc"},
        metadata={"echo": {"chunks": 3, "delayMs": 300}},
        configuration={"returnImmediately": True},
    )
    resumed = stream(served, "SubscribeToTask", pb.SubscribeToTaskRequest(id=slow["id"]))
    assert resumed[0]["task"]["id"] == slow["id"]
    assert resumed[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    with pytest.raises(grpc.RpcError) as caught:
        stream(served, "SubscribeToTask", pb.SubscribeToTaskRequest(id=slow["id"]), "key-bob")
    assert refusal(caught.value)[0] == grpc.StatusCode.NOT_FOUND


def test_a_deadline_ends_the_call_not_the_task(served: Served) -> None:
    """A blocking send whose deadline passes is DEADLINE_EXCEEDED; the task runs on."""
    stub = served.channel.unary_unary(
        SERVICE + "SendMessage",
        request_serializer=pb.SendMessageRequest.SerializeToString,
        response_deserializer=pb.SendMessageResponse.FromString,
    )
    request = send_request(metadata={"echo": {"delayMs": 1500}})
    with pytest.raises(grpc.RpcError) as caught:
        stub(request, metadata=[("authorization", "Bearer key-alice")], timeout=0.5)
    assert cast(grpc.Call, caught.value).code() == grpc.StatusCode.DEADLINE_EXCEEDED
    listing = pb.ListTasksRequest(status=pb.TASK_STATE_COMPLETED, page_size=100, history_length=9)

    def completed() -> bool:
        listed = call(served, "ListTasks", listing, pb.ListTasksResponse)
        return any(request.message.message_id in str(t) for t in listed.tasks)

    from tests.waiting import until_sync

    until_sync(completed, what="the task to complete after its caller's deadline")


def test_push_configs(served: Served) -> None:
    task = send(
        served,
        metadata={"echo": {"finalState": "working"}},
        configuration={"returnImmediately": True},
    )
    config = {"taskId": task["id"], "id": "hook", "url": "http://127.0.0.1:9/hook", "token": "t"}
    made = call(
        served,
        "CreateTaskPushNotificationConfig",
        ParseDict(config, pb.TaskPushNotificationConfig()),
        pb.TaskPushNotificationConfig,
    )
    assert MessageToDict(made) == config
    get = pb.GetTaskPushNotificationConfigRequest(task_id=task["id"], id="hook")
    got = call(served, "GetTaskPushNotificationConfig", get, pb.TaskPushNotificationConfig)
    assert got.url == config["url"]
    listing = pb.ListTaskPushNotificationConfigsRequest(task_id=task["id"])
    listed = call(
        served,
        "ListTaskPushNotificationConfigs",
        listing,
        pb.ListTaskPushNotificationConfigsResponse,
    )
    assert [c.id for c in listed.configs] == ["hook"]
    delete = pb.DeleteTaskPushNotificationConfigRequest(task_id=task["id"], id="hook")
    call(served, "DeleteTaskPushNotificationConfig", delete, empty_pb2.Empty)
    code, _ = refused(served, "GetTaskPushNotificationConfig", get, pb.TaskPushNotificationConfig)
    assert code == grpc.StatusCode.NOT_FOUND
    bad = ParseDict({**config, "url": "http://example.invalid/"}, pb.TaskPushNotificationConfig())
    code, _ = refused(
        served, "CreateTaskPushNotificationConfig", bad, pb.TaskPushNotificationConfig
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT


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


def test_calls_are_counted_and_audited(served: Served) -> None:
    send(served)
    metrics = httpx.get(f"{served.base}/metrics", timeout=30).text
    assert (
        'gateway_operations_total{binding="grpc",operation="SendMessage",outcome="ok"}' in metrics
    )
    assert 'operation="GetTask",outcome="TaskNotFoundError"' in metrics

    def audited() -> list[dict[str, Any]]:
        page = httpx.get(
            f"{served.base}/audit",
            params={"operation": "grpc:SendMessage"},
            headers={"Authorization": "Bearer key-admin"},
            timeout=30,
        ).json()
        items: list[dict[str, Any]] = page["items"]
        return items

    from tests.waiting import until_sync

    items = until_sync(audited, what="the gRPC send's audit entry")
    assert items[0]["user"] == "alice" and items[0]["taskId"] and items[0]["contextId"]
    assert items[0]["client"] == "127.0.0.1" and items[0]["outcome"] == "ok"


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


def test_a_stream_left_on_one_replica_is_resumed_on_another(tmp_path: Path, redis_url: str) -> None:
    """A client leaving its stream on replica A ends its stream only: the task runs on;
    SubscribeToTask on replica B gives the task as it stands, then the rest until it
    completes. A's graceful stop ends its open gRPC streams cleanly (status OK)."""
    env = {
        "REDIS_URL": redis_url,
        "GATEWAY_API_KEYS": orjson.dumps(API_KEYS).decode(),
        "GATEWAY_SHUTDOWN_GRACE_SECONDS": "1",
    }
    port_a, port_b = free_port(), free_port()
    chunked = {"echo": {"chunks": 6, "delayMs": 400}}
    key: tuple[tuple[str, str | bytes], ...] = (("authorization", "Bearer key-alice"),)
    with (
        serving(tmp_path, GATEWAY_GRPC_PORT=str(port_a), **env) as (a, _),
        serving(tmp_path, GATEWAY_GRPC_PORT=str(port_b), **env),
        grpc.insecure_channel(f"127.0.0.1:{port_a}") as channel_a,
        grpc.insecure_channel(f"127.0.0.1:{port_b}") as channel_b,
    ):
        streaming = channel_a.unary_stream(
            SERVICE + "SendStreamingMessage",
            request_serializer=pb.SendMessageRequest.SerializeToString,
            response_deserializer=pb.StreamResponse.FromString,
        )
        events = streaming(send_request({"text": "abcdef"}, metadata=chunked), metadata=key)
        first = next(events)
        task_id = first.task.id
        next(events)
        events.cancel()  # the client goes away
        subscribe = channel_b.unary_stream(
            SERVICE + "SubscribeToTask",
            request_serializer=pb.SubscribeToTaskRequest.SerializeToString,
            response_deserializer=pb.StreamResponse.FromString,
        )
        resumed = list(subscribe(pb.SubscribeToTaskRequest(id=task_id), metadata=key, timeout=60))
        assert resumed[0].task.id == task_id
        assert resumed[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
        # A stream open on A when A stops gracefully ends with OK, before the task does.
        working = {"echo": {"finalState": "working"}}
        open_stream = streaming(send_request(metadata=working), metadata=key, timeout=60)
        assert next(open_stream).task.id
        a.send_signal(signal.SIGTERM)
        rest = list(open_stream)  # what was still under way; no final state
        assert all(e.status_update.status.state != pb.TASK_STATE_COMPLETED for e in rest)
        assert open_stream.code() == grpc.StatusCode.OK
        assert a.wait(timeout=60) == 0


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
