"""The gRPC binding's streams: streaming and subscribing, a deadline that ends the call and
not the task, push configs, and a stream left on one replica resumed on another."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, cast

import grpc
import orjson
import pytest
from google.protobuf import empty_pb2
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.message import Message

from gateway.embedded_redis import free_port
from gateway.grpcapi.proto import a2a_pb2 as pb
from tests.conftest import API_KEYS
from tests.grpc_gateway import SERVICE, Served, call, refusal, refused, send, send_request
from tests.grpc_gateway import served as served
from tests.processes import serving, slow_process_test

pytestmark = slow_process_test


def stream(served: Served, method: str, request: Message, key: str = "key-alice") -> list[Any]:
    stub = served.channel.unary_stream(
        SERVICE + method,
        request_serializer=request.SerializeToString,
        response_deserializer=pb.StreamResponse.FromString,
    )
    events = stub(request, metadata=[("authorization", f"Bearer {key}")], timeout=60)
    return [MessageToDict(e) for e in events]


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
