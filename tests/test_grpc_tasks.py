"""The gRPC binding's tasks, driven with grpcio directly: the same tasks, principals,
contexts, errors, audit and metrics as the other bindings. The official 1.x client over gRPC
is in ``test_client_sdk1x.py``."""

from __future__ import annotations

import uuid
from typing import Any, cast

import grpc
import httpx
import pytest
from google.protobuf.json_format import MessageToDict

from gateway.grpcapi.proto import a2a_pb2 as pb
from tests.grpc_gateway import Served, call, refused, send, send_request
from tests.grpc_gateway import served as served
from tests.processes import slow_process_test

pytestmark = slow_process_test


VITALS = {"patient": {"name": "Zoë Ångström 患者", "age": 72}, "flags": [True, None]}


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
