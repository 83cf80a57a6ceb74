"""The JSON-RPC 2.0 binding on the wire: envelopes, ids, notifications, batches, the A2A
error codes of both versions, and the routes refused until push notifications exist."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import auth, message

JSON = {"Content-Type": "application/json"}


def rpc(method: str, params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": request_id}
    if params is not None:
        body["params"] = params
    return body


async def call(c: httpx.AsyncClient, body: Any, path: str = "/", **kw: Any) -> Any:
    r = await c.post(path, json=body, **kw)
    assert r.status_code == 200, r.text
    return r.json()


async def test_send_get_cancel_over_a2a_03(client: httpx.AsyncClient) -> None:
    sent = await call(client, rpc("message/send", {"message": message("hi")}, "req-1"))
    assert sent["id"] == "req-1" and sent["jsonrpc"] == "2.0"
    task = sent["result"]
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    got = await call(client, rpc("tasks/get", {"id": task["id"], "historyLength": 1}, 7))
    assert got["id"] == 7 and len(got["result"]["history"]) == 1
    done = await call(client, rpc("tasks/cancel", {"id": task["id"]}))
    assert done["error"]["code"] == -32002  # completed: not cancelable
    assert done["error"]["data"]["error"] == "TaskNotCancelableError"


async def test_a2a_10_methods_answer_in_the_10_dialect(client: httpx.AsyncClient) -> None:
    params = {
        "message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"data": {"x": [1]}}]},
        "configuration": {"returnImmediately": False},
    }
    sent = await call(client, rpc("SendMessage", params), "/agents/echo")
    task = sent["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED" and "kind" not in task
    got = (await call(client, rpc("GetTask", {"id": task["id"]}), "/agents/echo"))["result"]
    assert got["history"][0] == {
        "messageId": "m-1",
        "role": "ROLE_USER",
        "parts": [{"data": {"x": [1]}}],
        "contextId": task["contextId"],
        "taskId": task["id"],
    }
    listed = (await call(client, rpc("ListTasks", {"pageSize": 10})))["result"]
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert listed["totalSize"] == 1 and listed["nextPageToken"] == ""
    missing = await call(client, rpc("GetTask", {"id": "nope"}))
    assert missing["error"]["code"] == -32001
    assert missing["error"]["data"] == [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "TASK_NOT_FOUND",
            "domain": "a2a-protocol.org",
        }
    ]


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("agent/getAuthenticatedExtendedCard", -32007),
        ("GetExtendedAgentCard", -32007),
        ("tasks/list", -32601),
        ("no/such/method", -32601),
    ],
)
async def test_unserved_methods_answer_a2a_errors(
    client: httpx.AsyncClient, method: str, code: int
) -> None:
    answer = await call(client, rpc(method, {"id": "t"}, "x"))
    assert answer["id"] == "x" and answer["error"]["code"] == code


@pytest.mark.parametrize(
    ("body", "code", "echoed"),
    [
        ({"jsonrpc": "1.0", "method": "tasks/get", "id": 3}, -32600, 3),
        ({"jsonrpc": "2.0", "id": 4}, -32600, 4),
        ({"jsonrpc": "2.0", "method": 5, "id": 5}, -32600, 5),
        ({"jsonrpc": "2.0", "method": "tasks/get", "id": {"a": 1}}, -32600, None),
        ({"jsonrpc": "2.0", "method": "tasks/get", "id": True}, -32600, None),
        ("a string", -32600, None),
        ({"jsonrpc": "2.0", "method": "tasks/get", "params": [1], "id": 6}, -32602, 6),
        ({"jsonrpc": "2.0", "method": "tasks/get", "params": {}, "id": 7}, -32602, 7),
        (
            {
                "jsonrpc": "2.0",
                "method": "tasks/get",
                "params": {"id": "t", "historyLength": -1},
                "id": 8,
            },
            -32602,
            8,
        ),
        (
            {"jsonrpc": "2.0", "method": "message/send", "params": {"message": {}}, "id": 9},
            -32602,
            9,
        ),
    ],
)
async def test_invalid_requests(
    client: httpx.AsyncClient, body: Any, code: int, echoed: Any
) -> None:
    answer = await call(client, body)
    assert answer["error"]["code"] == code and answer["id"] == echoed


async def test_parse_errors_and_media_types(client: httpx.AsyncClient) -> None:
    r = await client.post("/", content=b"{not json", headers=JSON)
    assert r.status_code == 200
    assert r.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32700,
            "message": "Request body is not valid JSON",
            "data": {
                "error": "JSONParseError",
                "code": -32700,
                "message": "Request body is not valid JSON",
            },
        },
    }
    r = await client.post("/", content=b"{}", headers={"Content-Type": "text/plain"})
    assert r.json()["error"]["code"] == -32005


async def test_notifications_get_no_answer_but_run(client: httpx.AsyncClient) -> None:
    note = {"jsonrpc": "2.0", "method": "message/send", "params": {"message": message("n")}}
    r = await client.post("/", json=note)
    assert r.status_code == 204 and r.content == b""
    contexts = (await client.get("/v1/contexts")).json()
    assert contexts["total"] == 1
    r = await client.post("/", json={"jsonrpc": "2.0", "method": "no/such"})
    assert r.status_code == 204  # a failed notification is not answered either


async def test_batches(client: httpx.AsyncClient) -> None:
    batch = [
        rpc("message/send", {"message": message("a")}, 1),
        {"jsonrpc": "2.0", "method": "tasks/get", "params": {"id": "nope"}},  # notification
        rpc("tasks/get", {"id": "nope"}, "two"),
        {"bad": True},
        rpc("GetTask", {"id": "nope"}, 3),
    ]
    answers = await call(client, batch)
    assert [a["id"] for a in answers] == [1, "two", None, 3]
    assert answers[0]["result"]["status"]["state"] == "completed"
    assert [a["error"]["code"] for a in answers[1:]] == [-32001, -32600, -32001]
    assert isinstance(answers[3]["error"]["data"], list)  # 1.0 method, 1.0 error shape
    for empty_or_huge in ([], [rpc("tasks/get", {"id": "t"}, i) for i in range(101)]):
        answer = await call(client, empty_or_huge)
        assert answer["error"]["code"] == -32600 and answer["id"] is None
    r = await client.post("/", json=[{"jsonrpc": "2.0", "method": "tasks/get"}])
    assert r.status_code == 204


async def test_agents_versions_and_credentials(keyed: httpx.AsyncClient) -> None:
    alice = auth("alice")
    answer = await call(keyed, rpc("tasks/get", {"id": "t"}), "/agents/nobody", headers=alice)
    assert answer["error"]["code"] == -32011
    answer = await call(
        keyed, rpc("tasks/get", {"id": "t"}), headers={**alice, "A2A-Version": "2.0"}
    )
    assert answer["error"]["code"] == -32009
    for version in ("0.3", "1.0", "1.0.1", "0.3.0"):
        answer = await call(
            keyed, rpc("GetTask", {"id": "t"}), headers={**alice, "A2A-Version": version}
        )
        assert answer["error"]["code"] == -32001
    r = await keyed.post("/", json=rpc("tasks/get", {"id": "t"}))
    assert r.status_code == 401 and r.json()["error"] == "UnauthenticatedError"
    answer = await call(keyed, rpc("GetTask", {"id": "t", "tenant": "t2"}), headers=alice)
    assert answer["error"]["code"] == -32601  # another tenant: nothing there


async def test_error_bodies_do_not_echo_content(client: httpx.AsyncClient) -> None:
    secret = "Patient John Doe has HIV"
    bad = {
        "message": {"role": "agent", "messageId": "m", "parts": [{"kind": "text", "text": secret}]}
    }
    r = await client.post("/", json=rpc("message/send", bad))
    assert r.json()["error"]["code"] == -32602 and secret not in r.text


async def test_rest_10_tenant_prefix_and_version(keyed: httpx.AsyncClient) -> None:
    alice = auth("alice")
    body = {"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "hi"}]}}
    r = await keyed.post("/agents/echo/a2a/t1/message:send", json=body, headers=alice)
    assert r.status_code == 200, r.text
    task = r.json()["task"]
    for path in (f"/a2a/t1/tasks/{task['id']}", f"/tasks/{task['id']}", f"/a2a/tasks/{task['id']}"):
        r = await keyed.get(path, headers=alice)
        assert r.status_code == 200 and r.json()["status"]["state"] == "TASK_STATE_COMPLETED"
    r = await keyed.get(f"/a2a/t2/tasks/{task['id']}", headers=alice)
    assert r.status_code == 404
    # a tenant named in a body is checked as in the path, a cancel's as a send's
    r = await keyed.post(f"/a2a/tasks/{task['id']}:cancel", json={"tenant": "t2"}, headers=alice)
    assert r.status_code == 404
    r = await keyed.get(f"/a2a/tasks/{task['id']}", headers={**alice, "A2A-Version": "0.2"})
    assert r.status_code == 400
    assert r.json()["error"]["details"][0]["reason"] == "VERSION_NOT_SUPPORTED"
    r = await keyed.get(f"/a2a/tasks/{task['id']}", headers=auth("bob"))
    assert r.status_code == 404
    assert r.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"


@pytest.mark.parametrize(
    "token",
    [
        str(2**53 + 1),
        str(2**63),
        str(2**64),  # beyond what orjson reads as an integer
        str(-(2**63) - 1),
        str(2**200),
        "1.10",
        "1e2",
        "-0.0",
    ],
)
async def test_a_numeric_id_is_echoed_as_written(client: httpx.AsyncClient, token: str) -> None:
    one = f'{{"jsonrpc": "2.0", "method": "tasks/get", "params": {{"id": "t"}}, "id": {token}}}'
    for body in (one, f"[{one}, {one}]"):
        r = await client.post("/", content=body.encode(), headers=JSON)
        assert r.status_code == 200
        assert f'"id":{token},' in r.text
        answers = r.json() if body.startswith("[") else [r.json()]
        assert all(a["error"]["code"] == -32001 for a in answers)


async def test_a_streamed_answer_echoes_a_big_id_as_written(client: httpx.AsyncClient) -> None:
    token = str(2**64 + 1)
    params = orjson.dumps({"message": message("s")}).decode()
    body = f'{{"jsonrpc": "2.0", "method": "message/stream", "params": {params}, "id": {token}}}'
    r = await client.post("/", content=body.encode(), headers=JSON)
    events = [line for line in r.text.splitlines() if line.startswith("data: ")]
    assert events and all(f'"id":{token},' in e for e in events)
