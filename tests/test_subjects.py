"""A context's subject: named by its first message (``metadata.subject``), validated, bound
for good, inherited by every later message, shown when the context is read, and carried
in the message metadata by every binding (0.3 REST and JSON-RPC, 1.0 REST and JSON-RPC)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.agents.base import AgentRequest, AgentUpdate, ArtifactUpdate, StatusUpdate
from tests.agents import TestAgent
from tests.conftest import AppFactory, post_message, send_task

PATIENT = "Patient/123"


class Subjects(TestAgent):
    """Reports the subject its message carries."""

    id = "subjects"

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        subject = (request.message.get("metadata") or {}).get("subject")
        yield ArtifactUpdate([{"kind": "data", "data": {"subject": subject}}], name="seen")
        yield StatusUpdate("completed")


@pytest.fixture
async def c(make_app: AppFactory) -> AsyncIterator[httpx.AsyncClient]:
    async with make_app(agents=[Subjects()]) as client:
        yield client


def _seen(task: dict[str, Any]) -> Any:
    return task["artifacts"][0]["parts"][0]["data"]["subject"]


async def test_the_first_message_binds_and_later_ones_inherit(c: httpx.AsyncClient) -> None:
    first = await send_task(c, "admit", agent="subjects", metadata={"subject": PATIENT})
    cid = first["contextId"]
    later = await send_task(c, "vitals", agent="subjects", contextId=cid)
    again = await send_task(
        c, "same patient", agent="subjects", contextId=cid, metadata={"subject": PATIENT}
    )
    assert [_seen(t) for t in (first, later, again)] == [PATIENT] * 3
    page = (await c.get(f"/v1/contexts/{cid}")).json()
    assert page["subject"] == PATIENT
    history = [m for t in page["items"] for m in t["history"] if m["role"] == "user"]
    assert [m["metadata"]["subject"] for m in history] == [PATIENT] * 3
    other = await post_message(
        c, "another patient", agent="subjects", contextId=cid, metadata={"subject": "Patient/9"}
    )
    assert other.status_code == 400 and other.json()["error"] == "InvalidParamsError"
    assert "Patient/9" not in other.text and PATIENT not in other.text


async def test_an_unbound_context_stays_unbound(c: httpx.AsyncClient) -> None:
    first = await send_task(c, "no subject", agent="subjects")
    assert _seen(first) is None
    cid = first["contextId"]
    late = await post_message(
        c, "bind now", agent="subjects", contextId=cid, metadata={"subject": PATIENT}
    )
    assert late.status_code == 400 and late.json()["error"] == "InvalidParamsError"
    assert "subject" not in (await c.get(f"/v1/contexts/{cid}")).json()


@pytest.mark.parametrize("subject", ["", "x" * 201, 123, None, ["Patient/1"]])
async def test_an_invalid_subject_is_refused(c: httpx.AsyncClient, subject: Any) -> None:
    r = await post_message(c, "hi", agent="subjects", metadata={"subject": subject})
    assert r.status_code == 400 and r.json()["error"] == "InvalidParamsError"
    assert (await c.get("/v1/contexts")).json()["total"] == 0


async def _rpc(c: httpx.AsyncClient, method: str, params: Any) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    r = await c.post("/agents/subjects", json=body)
    assert r.status_code == 200 and "result" in r.json(), r.text
    return r.json()["result"]


async def test_every_binding_carries_the_subject(c: httpx.AsyncClient) -> None:
    first = await send_task(c, "admit", agent="subjects", metadata={"subject": PATIENT})
    cid = first["contextId"]
    v03 = {"role": "user", "kind": "message", "parts": [{"kind": "text", "text": "rpc"}]}
    rpc03 = await _rpc(
        c, "message/send", {"message": {**v03, "messageId": "m-03", "contextId": cid}}
    )
    v10 = {"role": "ROLE_USER", "parts": [{"text": "one"}], "contextId": cid}
    rest10 = await c.post(
        "/agents/subjects/a2a/message:send", json={"message": {**v10, "messageId": "m-10"}}
    )
    assert rest10.status_code == 200, rest10.text
    rpc10 = await _rpc(c, "SendMessage", {"message": {**v10, "messageId": "m-11"}})
    proto = {"role": "ROLE_USER", "content": [{"text": "proto"}], "contextId": cid}
    rest_proto = await c.post(
        "/agents/subjects/a2a/v1/message:send",
        json={"request": {**proto, "messageId": "m-p"}, "configuration": {"blocking": True}},
    )
    assert rest_proto.status_code == 200, rest_proto.text
    tasks = [rpc03, rest10.json()["task"], rpc10["task"]]
    assert [_seen(t) for t in tasks] == [PATIENT] * 3
    # read back through each binding: the user message's metadata names the subject
    got03 = await _rpc(c, "tasks/get", {"id": rpc03["id"]})
    got10 = (await c.get(f"/agents/subjects/a2a/tasks/{tasks[1]['id']}")).json()
    rpc_got10 = await _rpc(c, "GetTask", {"id": tasks[2]["id"]})
    rest03 = (await c.get(f"/v1/tasks/{first['id']}")).json()
    got_proto = (
        await c.get(f"/agents/subjects/a2a/v1/tasks/{rest_proto.json()['task']['id']}")
    ).json()
    for task in (got03, got10, rpc_got10, rest03, got_proto):
        assert task["history"][0]["metadata"]["subject"] == PATIENT
