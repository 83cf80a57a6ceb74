"""message:send, rules 1–9 of the protocol."""

from __future__ import annotations

import asyncio
import base64
import uuid
from typing import Any

import httpx

from tests.conftest import AppFactory, Send, message, post_message
from tests.waiting import until


async def test_new_context_is_created_with_unguessable_ids(send: Send) -> None:
    r = await send("hello")
    assert r.status_code == 200
    task = r.json()["task"]
    assert task["status"]["state"] == "completed"
    for value in (task["id"], task["contextId"]):
        parsed = uuid.UUID(value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == value  # canonical: lower-case, hyphenated
    assert "history" not in task  # historyLength defaults to 0 on send
    other = (await send("hello")).json()["task"]
    assert other["contextId"] != task["contextId"]


async def test_echo_artifact_holds_text_and_data_and_report(send: Send) -> None:
    data = {"kind": "data", "data": {"vitals": {"hr": 72, "bp": [120, 80]}, "n": 1.5e300}}
    task = (await send("note", data)).json()["task"]
    parts = task["artifacts"][0]["parts"]
    assert parts[0] == {"kind": "text", "text": "note"}
    assert parts[1] == data
    assert parts[2]["data"]["echo"] == {"historyMessages": 0, "referenceTaskIds": [], "recalled": 0}


async def test_a_runs_artifact_ids_are_name_based_uuids_of_its_task_message_and_rank(
    send: Send,
) -> None:
    # The same in every attempt of a run, so a run started over replaces what stream readers
    # saw of an earlier attempt's artifacts: version-5 UUIDs of the task, the message's seq
    # in its context (the first turn's reply is seq 2) and the artifact's rank in the run.
    first = (await send("one")).json()["task"]
    second = (await send("two", contextId=first["contextId"])).json()["task"]
    for task, seq in ((first, 1), (second, 3)):
        expected = uuid.uuid5(uuid.NAMESPACE_URL, f"a2a-task:{task['id']}/{seq}/1")
        assert task["artifacts"][0]["artifactId"] == str(expected)


async def test_context_continuation_gives_agent_prior_messages(send: Send) -> None:
    first = (await send("one")).json()["task"]
    second = (await send("two", contextId=first["contextId"])).json()["task"]
    assert second["contextId"] == first["contextId"]
    assert second["id"] != first["id"]
    report = second["artifacts"][0]["parts"][-1]["data"]["echo"]
    assert report["historyMessages"] == 2  # user + agent message of the first turn


async def test_unknown_context_is_404_when_client_ids_are_refused(make_app: AppFactory) -> None:
    async with make_app(client_context_ids="refuse") as c:
        r = await post_message(c, "x", contextId=str(uuid.uuid4()))
    assert r.status_code == 404
    assert r.json()["error"] == "ContextNotFoundError"
    assert r.json()["code"] == -32010


async def test_an_unknown_context_named_with_a_task_is_404(send: Send) -> None:
    r = await send("x", contextId=str(uuid.uuid4()), taskId=str(uuid.uuid4()))
    assert r.status_code == 404
    assert r.json()["error"] == "ContextNotFoundError"


async def test_task_continuation_and_409_on_terminal(send: Send) -> None:
    cfg = {"historyLength": 10}
    open_task = (
        await send("a", metadata={"echo": {"finalState": "input-required"}}, configuration=cfg)
    ).json()["task"]
    assert open_task["status"]["state"] == "input-required"
    assert open_task["status"]["message"]["role"] == "agent"
    cont = await send("b", taskId=open_task["id"], configuration=cfg)
    assert cont.status_code == 200
    task = cont.json()["task"]
    assert task["id"] == open_task["id"] and task["contextId"] == open_task["contextId"]
    assert task["status"]["state"] == "completed"
    assert [m["role"] for m in task["history"]] == ["user", "agent", "user", "agent"]
    again = await send("c", taskId=open_task["id"])
    assert again.status_code == 409
    assert again.json()["error"] == "TaskNotContinuableError"


async def test_task_must_be_in_the_given_context(send: Send) -> None:
    a = (await send("a", metadata={"echo": {"finalState": "input-required"}})).json()["task"]
    b = (await send("b")).json()["task"]
    r = await send("x", taskId=a["id"], contextId=b["contextId"])
    assert r.status_code == 404
    assert r.json()["error"] == "TaskNotFoundError"
    r = await send("x", taskId=str(uuid.uuid4()))
    assert r.status_code == 404


async def test_reference_task_ids_validated_and_handed_to_agent(send: Send) -> None:
    first = (await send("a")).json()["task"]
    elsewhere = (await send("b")).json()["task"]
    missing = str(uuid.uuid4())
    r = await send(
        "c", contextId=first["contextId"], referenceTaskIds=[first["id"], missing, elsewhere["id"]]
    )
    assert r.status_code == 400
    body = r.json()
    assert body["error"] == "InvalidParamsError"
    assert body["data"]["unknownTaskIds"] == [missing, elsewhere["id"]]
    ok = await send("c", contextId=first["contextId"], referenceTaskIds=[first["id"]])
    report = ok.json()["task"]["artifacts"][0]["parts"][-1]["data"]["echo"]
    assert report["referenceTaskIds"] == [first["id"]]
    assert (await send("d", referenceTaskIds=[first["id"]])).status_code == 400


async def test_file_parts_stored_verbatim(send: Send) -> None:
    inline = {
        "kind": "file",
        "file": {"bytes": base64.b64encode(b"%PDF").decode(), "mimeType": "application/pdf"},
    }
    linked = {"kind": "file", "file": {"uri": "https://files.example/x.png", "name": "x.png"}}
    task = (await send("see", inline, linked, configuration={"historyLength": 2})).json()["task"]
    stored = task["history"][0]["parts"]
    assert stored[1] == inline and stored[2] == linked


async def test_bad_file_parts_are_400(send: Send) -> None:
    both = {"kind": "file", "file": {"bytes": "QQ==", "uri": "https://x/y"}}
    neither = {"kind": "file", "file": {"name": "x"}}
    garbage = {"kind": "file", "file": {"bytes": "***"}}
    relative = {"kind": "file", "file": {"uri": "no-scheme"}}
    for part in (both, neither, garbage, relative):
        r = await send(part)
        assert r.status_code == 400, part
        assert r.json()["error"] == "InvalidParamsError"


async def test_nonblocking_returns_submitted_then_poll(
    client: httpx.AsyncClient, send: Send
) -> None:
    r = await send("slow", metadata={"echo": {"delayMs": 300}}, configuration={"blocking": False})
    task = r.json()["task"]
    assert task["status"]["state"] == "submitted"

    async def completed() -> dict[str, Any] | None:
        polled: dict[str, Any] = (await client.get(f"/v1/tasks/{task['id']}")).json()
        return polled if polled["status"]["state"] == "completed" else None

    polled = await until(completed, what="the task to complete")
    assert [m["role"] for m in polled["history"]] == ["user", "agent"]


async def test_blocking_cap_returns_task_as_it_stands(make_app: object) -> None:
    async with make_app(blocking_timeout_seconds=0.3) as c:  # type: ignore[operator]
        body = {"message": message("x", metadata={"echo": {"finalState": "working"}})}
        r = await c.post("/v1/message:send", json=body)
        assert r.json()["task"]["status"]["state"] == "working"


async def test_steps_report_progress(client: httpx.AsyncClient, send: Send) -> None:
    meta = {"echo": {"delayMs": 600, "steps": 3}}
    task = (await send("x", metadata=meta, configuration={"blocking": False})).json()["task"]
    seen = set()

    async def completed() -> bool:
        polled = (await client.get(f"/v1/tasks/{task['id']}", params={"historyLength": 0})).json()
        seen.add(polled["status"].get("message", {}).get("parts", [{}])[0].get("text"))
        return bool(polled["status"]["state"] == "completed")

    await until(completed, what="the task to complete", every=0.01)
    assert seen & {"Step 1 of 3.", "Step 2 of 3.", "Step 3 of 3."}


async def test_final_state_failed(send: Send) -> None:
    task = (await send("x", metadata={"echo": {"finalState": "failed"}})).json()["task"]
    assert task["status"]["state"] == "failed"
    bad = (await send("x", metadata={"echo": {"delayMs": -5}})).json()["task"]
    assert bad["status"]["state"] == "failed"


async def test_history_length_on_send(send: Send) -> None:
    first = (await send("a", metadata={"echo": {"finalState": "input-required"}})).json()["task"]
    tid, cid = first["id"], first["contextId"]
    r = await send("b", taskId=tid, contextId=cid, configuration={"historyLength": 1})
    assert [m["role"] for m in r.json()["task"]["history"]] == ["agent"]
    r = await send("c", contextId=cid, configuration={"history_length": 2})  # snake-case alias
    assert len(r.json()["task"]["history"]) == 2
    r = await send("d", contextId=cid, configuration={"historyLength": -1})
    assert r.status_code == 400


async def test_accepted_output_modes(send: Send) -> None:
    r = await send("x", configuration={"acceptedOutputModes": ["image/png"]})
    assert r.status_code == 415
    assert r.json()["error"] == "ContentTypeNotSupportedError"
    for modes in (["text/plain"], ["application/*"], ["*/*"], ["image/png", "text/plain; q=1"]):
        assert (await send("x", configuration={"acceptedOutputModes": modes})).status_code == 200


async def test_idempotent_message_id_in_new_context(send: Send) -> None:
    first = (await send("same", message_id="m-1")).json()["task"]
    again = (await send("same", message_id="m-1")).json()["task"]
    assert again["id"] == first["id"] and again["contextId"] == first["contextId"]
    conflict = await send("different", message_id="m-1")
    assert conflict.status_code == 409
    assert conflict.json()["error"] == "IdempotencyConflictError"


async def test_idempotent_message_id_in_existing_context(
    client: httpx.AsyncClient, send: Send
) -> None:
    cid = (await send("a")).json()["task"]["contextId"]
    one = (await send("b", message_id="m-2", contextId=cid)).json()["task"]
    two = (await send("b", message_id="m-2", contextId=cid)).json()["task"]
    assert one["id"] == two["id"]
    page = (await client.get(f"/v1/contexts/{cid}")).json()
    assert page["total"] == 2


async def test_concurrent_same_message_id_makes_one_task(
    client: httpx.AsyncClient, send: Send
) -> None:
    replies = await asyncio.gather(*(send("same", message_id="m-c") for _ in range(20)))
    assert {r.status_code for r in replies} == {200}
    assert len({r.json()["task"]["id"] for r in replies}) == 1
    contexts = (await client.get("/v1/contexts")).json()
    assert contexts["total"] == 1
    assert contexts["items"][0]["taskCount"] == 1


async def test_idempotent_replay_after_scrub_opens_a_new_context(
    client: httpx.AsyncClient, send: Send
) -> None:
    first = (await send("same", message_id="m-s")).json()["task"]
    assert (await client.delete(f"/v1/contexts/{first['contextId']}")).status_code == 204
    again = (await send("same", message_id="m-s")).json()["task"]
    assert again["contextId"] != first["contextId"]
    assert again["status"]["state"] == "completed"


async def test_proto_json_spelling_is_accepted(client: httpx.AsyncClient) -> None:
    body = {
        "request": {
            "message_id": "p-1",
            "role": "ROLE_USER",
            "content": [{"text": "hi"}, {"data": {"data": {"k": "v"}}}],
        },
        "configuration": {"history_length": 2, "accepted_output_modes": ["text/plain"]},
    }
    r = await client.post("/v1/message:send", json=body)
    assert r.status_code == 200, r.text
    task = r.json()["task"]
    assert task["history"][0]["parts"] == [
        {"kind": "text", "text": "hi"},
        {"kind": "data", "data": {"k": "v"}},
    ]


async def test_role_must_be_user(send: Send) -> None:
    r = await send("x", role="agent")
    assert r.status_code == 400
    assert r.json()["data"]["errors"][0]["field"] == "message.role"


async def test_a_push_config_to_an_inward_address_is_refused(send: Send) -> None:
    # public https destinations are admitted by default; a private address is not
    r = await send("x", configuration={"pushNotificationConfig": {"url": "https://10.1.2.3/x"}})
    assert r.status_code == 400
    assert r.json()["error"] == "InvalidParamsError"
    assert r.json()["data"]["errors"][0]["field"] == "configuration.pushNotificationConfig.url"


async def test_agent_base_paths(client: httpx.AsyncClient, send: Send) -> None:
    r = await send("x", path="/agents/echo/v1/message:send")
    assert r.status_code == 200
    task = r.json()["task"]
    assert (await client.get(f"/agents/echo/v1/tasks/{task['id']}")).status_code == 200
    r = await send("x", path="/agents/nope/v1/message:send")
    assert r.status_code == 404
    assert r.json()["error"] == "AgentNotFoundError"
