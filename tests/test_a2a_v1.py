"""A2A 1.0 semantics on the wire (REST and JSON-RPC): blocking and returnImmediately, parts
without kind, historyLength, and ListTasks filters and bounds."""

from __future__ import annotations

from typing import Any

import httpx


def v1_message(*parts: dict[str, Any], message_id: str, **fields: Any) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": message_id, "parts": list(parts), **fields}


async def send(c: httpx.AsyncClient, message: dict[str, Any], **config: Any) -> Any:
    body: dict[str, Any] = {"message": message}
    if config:
        body["configuration"] = config
    r = await c.post("/a2a/message:send", json=body)
    assert r.status_code == 200, r.text
    return r.json()["task"]


async def test_blocking_returns_on_interrupted_states_and_return_immediately(
    client: httpx.AsyncClient,
) -> None:
    asked = await send(
        client,
        v1_message(
            {"text": "q"}, message_id="m1", metadata={"echo": {"finalState": "input-required"}}
        ),
    )
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    early = await send(
        client,
        v1_message({"text": "w"}, message_id="m2", metadata={"echo": {"finalState": "working"}}),
        returnImmediately=True,
    )
    assert early["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    canceled = (await client.post(f"/a2a/tasks/{early['id']}:cancel")).json()
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"


async def test_parts_without_kind_round_trip(client: httpx.AsyncClient) -> None:
    parts: list[dict[str, Any]] = [
        {"text": "see attached", "metadata": {"lang": "en"}},
        {
            "url": "https://files.example/ecg.pdf",
            "mediaType": "application/pdf",
            "filename": "ecg.pdf",
        },
        {"raw": "aGVsbG8=", "mediaType": "text/plain"},
        {"data": {"hr": 72, "nested": {"bp": [120, 80]}, "name": "Zoë"}},
        # data is any JSON value in 1.0
        {"data": [1, "two", {"three": None}], "metadata": {"source": "monitor"}},
        {"data": "a string"},
        {"data": 36.6},
        {"data": None},
    ]
    task = await send(client, v1_message(*parts, message_id="m3"))
    assert "history" not in task  # a send's historyLength unset: none
    # historyLength: unset on GetTask is the whole history, 0 none, N the last N.
    full = (await client.get(f"/a2a/tasks/{task['id']}")).json()
    assert [m["role"] for m in full["history"]] == ["ROLE_USER", "ROLE_AGENT"]
    assert full["history"][0]["parts"] == parts
    assert "history" not in (await client.get(f"/a2a/tasks/{task['id']}?historyLength=0")).json()
    last = (await client.get(f"/a2a/tasks/{task['id']}?historyLength=1")).json()["history"]
    assert last == full["history"][-1:]
    # The same message read over the canonical REST: kinds and 0.3 names.
    canonical = (await client.get(f"/v1/tasks/{task['id']}")).json()["history"][0]["parts"]
    assert canonical[1] == {
        "kind": "file",
        "file": {
            "uri": "https://files.example/ecg.pdf",
            "mimeType": "application/pdf",
            "name": "ecg.pdf",
        },
    }
    # a value that is no object reads as one there, marked in the part's metadata
    assert canonical[4] == {
        "kind": "data",
        "data": {"value": [1, "two", {"three": None}]},
        "metadata": {"source": "monitor", "$jsonValue": True},
    }
    assert canonical[7] == {
        "kind": "data",
        "data": {"value": None},
        "metadata": {"$jsonValue": True},
    }


async def test_list_tasks_filters_and_bounds(client: httpx.AsyncClient) -> None:
    done = await send(client, v1_message({"text": "a"}, message_id="l1"))
    other = await send(client, v1_message({"text": "b"}, message_id="l2"))
    open_task = await send(
        client,
        v1_message(
            {"text": "c"},
            message_id="l3",
            contextId=other["contextId"],
            metadata={"echo": {"finalState": "working"}},
        ),
        returnImmediately=True,
    )

    async def listed(query: str) -> Any:
        r = await client.get(f"/a2a/tasks?{query}")
        assert r.status_code == 200, r.text
        return r.json()

    everything = await listed("")
    assert everything["pageSize"] == 50 and everything["totalSize"] == 3
    assert [t["id"] for t in everything["tasks"]][-1] == done["id"]  # newest status first
    assert all("artifacts" not in t and "history" not in t for t in everything["tasks"])
    in_context = await listed(f"contextId={other['contextId']}")
    assert {t["id"] for t in in_context["tasks"]} == {other["id"], open_task["id"]}
    working = await listed("status=TASK_STATE_WORKING")
    submitted = await listed("status=TASK_STATE_SUBMITTED")
    assert [t["id"] for t in working["tasks"] + submitted["tasks"]] == [open_task["id"]]
    completed = await listed("status=TASK_STATE_COMPLETED&includeArtifacts=true&historyLength=1")
    assert {t["id"] for t in completed["tasks"]} == {done["id"], other["id"]}
    assert all(len(t["history"]) == 1 and t["artifacts"] for t in completed["tasks"])
    stamp = done["status"]["timestamp"]
    later = await listed(f"statusTimestampAfter={stamp}")
    assert done["id"] not in {t["id"] for t in later["tasks"]}
    assert (await listed("statusTimestampAfter=2000-01-01T00:00:00Z"))["totalSize"] == 3
    for bad in ("pageSize=0", "pageSize=101", "statusTimestampAfter=yesterday",
                "statusTimestampAfter=2024-13-45T99:99:99Z", "pageToken=not-a-token"):  # fmt: skip
        r = await client.get(f"/a2a/tasks?{bad}")
        assert r.status_code == 400, bad
        assert r.json()["error"]["details"][0]["reason"] == "INVALID_PARAMS"


async def _send_both(c: httpx.AsyncClient, message: dict[str, Any]) -> list[str | None]:
    """A send over 1.0 REST and 1.0 JSON-RPC: each one's error reason (None: accepted)."""
    r = await c.post("/a2a/message:send", json={"message": message})
    rest = None if r.status_code == 200 else r.json()["error"]["details"][0]["reason"]
    assert r.status_code in (200, 400), r.text
    rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    answer = (await c.post("/", json=rpc)).json()
    rpc_reason = answer["error"]["data"][0]["reason"] if "error" in answer else None
    return [rest, rpc_reason]


async def test_both_10_bindings_read_roles_alike(client: httpx.AsyncClient) -> None:
    """proto3 JSON: an enum by its name or its number; the canonical "user" is read too.
    Unset, unspecified or unknown (a newer proto's; protobuf-es's "UNRECOGNIZED") is the
    sender's role, as the official 1.x servers read it. An agent's role, or no enum at all,
    is refused, the same way by both bindings."""
    accepted = ["ROLE_USER", 1, "user", 0, "ROLE_UNSPECIFIED", "UNRECOGNIZED", 3, "USER", None]
    for n, role in enumerate(accepted):
        message = v1_message({"text": "hi"}, message_id=f"role-{n}", role=role)
        assert await _send_both(client, message) == [None, None], role
    unset = v1_message({"text": "hi"}, message_id="role-unset")
    del unset["role"]
    assert await _send_both(client, unset) == [None, None]
    for n, role in enumerate([2, "ROLE_AGENT", "agent", True, 1.5, {"a": 1}]):
        message = v1_message({"text": "hi"}, message_id=f"bad-role-{n}", role=role)
        assert await _send_both(client, message) == ["INVALID_PARAMS"] * 2, role


async def test_a_10_part_holds_one_content(client: httpx.AsyncClient) -> None:
    parts: list[dict[str, Any]] = [
        {"text": "hi", "data": {"a": 1}},
        {"text": "hi", "url": "https://files.example/a.pdf"},
        {"raw": "aGk=", "data": None},  # a null data is the null value
    ]
    for n, part in enumerate(parts):
        message = v1_message({"text": "first"}, part, message_id=f"two-{n}")
        assert await _send_both(client, message) == ["INVALID_PARAMS"] * 2, part
    r = await client.post(
        "/a2a/message:send",
        json={"message": v1_message({"text": "hi", "data": {"a": 1}}, message_id="two-x")},
    )
    assert r.json()["error"]["details"][1]["fieldViolations"][0]["field"] == "message.parts.0"
    # a null member is unset (proto3 JSON): this part holds data only
    task = await send(client, v1_message({"text": None, "data": {"a": 1}}, message_id="one"))
    got = (await client.get(f"/a2a/tasks/{task['id']}")).json()
    assert got["history"][0]["parts"] == [{"data": {"a": 1}}]


async def test_list_tasks_takes_a_state_by_number(client: httpx.AsyncClient) -> None:
    done = await send(client, v1_message({"text": "a"}, message_id="n1"))
    for status in ("TASK_STATE_COMPLETED", 3):
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"status": status}}
        listed = (await client.post("/", json=rpc)).json()["result"]
        assert [t["id"] for t in listed["tasks"]] == [done["id"]], status
        r = await client.get(f"/a2a/tasks?status={status}")
        assert [t["id"] for t in r.json()["tasks"]] == [done["id"]], status
    r = await client.get("/a2a/tasks?status=2")
    assert r.status_code == 200 and r.json()["tasks"] == []
    # Unspecified or unknown (a newer proto's, protobuf-es's "UNRECOGNIZED"): no filter,
    # as the official 1.x servers read it.
    for unknown in (0, "TASK_STATE_UNSPECIFIED", "UNRECOGNIZED", 42, "3", -1):
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"status": unknown}}
        listed = (await client.post("/", json=rpc)).json()["result"]
        assert done["id"] in [t["id"] for t in listed["tasks"]], unknown
    for query in ("0", "42", "UNRECOGNIZED"):
        r = await client.get(f"/a2a/tasks?status={query}")
        assert done["id"] in [t["id"] for t in r.json()["tasks"]], query
    for bad in (True, 1.5, {"a": 1}):
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"status": bad}}
        assert (await client.post("/", json=rpc)).json()["error"]["code"] == -32602, bad
