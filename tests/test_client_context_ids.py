"""Client-named contextIds (A2A 1.0 §3.4): a send naming a context the user does not have
opens it under that id, per user; ``GATEWAY_CLIENT_CONTEXT_IDS=refuse`` refuses it (404)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import AppFactory, Send, auth


def _rpc_send(text: str, message_id: str, context_id: str) -> dict[str, Any]:
    message = {
        "role": "ROLE_USER",
        "messageId": message_id,
        "contextId": context_id,
        "parts": [{"text": text}],
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


async def test_a_named_context_is_opened_then_continued_over_both_bindings(
    client: httpx.AsyncClient, send: Send
) -> None:
    r = await send("first", contextId="app.session-42_A", message_id="n1")
    assert r.status_code == 200, r.text
    first = r.json()["task"]
    assert first["contextId"] == "app.session-42_A"
    # JSON-RPC 1.0: continues it (the agent sees the first turn), then opens another
    answer = (await client.post("/", json=_rpc_send("second", "n2", "app.session-42_A"))).json()
    second = answer["result"]["task"]
    assert second["contextId"] == "app.session-42_A" and second["id"] != first["id"]
    report = second["artifacts"][0]["parts"][-1]["data"]["echo"]
    assert report["historyMessages"] == 2
    answer = (await client.post("/", json=_rpc_send("other", "n3", "tck-ctx-1"))).json()
    assert answer["result"]["task"]["contextId"] == "tck-ctx-1"
    # ListTasks filtered by the named context finds its tasks, and only those
    listed = (await client.get("/a2a/tasks", params={"contextId": "app.session-42_A"})).json()
    assert sorted(t["id"] for t in listed["tasks"]) == sorted([first["id"], second["id"]])
    rpc = {"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {"contextId": "tck-ctx-1"}}
    listed = (await client.post("/", json=rpc)).json()["result"]
    assert [t["contextId"] for t in listed["tasks"]] == ["tck-ctx-1"]
    page = (await client.get("/v1/contexts/app.session-42_A")).json()
    assert page["total"] == 2
    # a retry of the opening message replays it
    again = await send("first", contextId="app.session-42_A", message_id="n1")
    assert again.json()["task"]["id"] == first["id"]


async def test_an_invalid_named_context_id_is_400(client: httpx.AsyncClient, send: Send) -> None:
    for bad in ("a b", "x" * 129, "ctx:items", "../up", ".", "ctx/1", "é", "{tag}"):
        r = await send("x", contextId=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"] == "InvalidParamsError"
        assert r.json()["data"]["errors"][0]["field"] == "message.contextId"
        answer = (await client.post("/", json=_rpc_send("x", "m", bad))).json()
        assert answer["error"]["code"] == -32602, bad
    assert (await send("x", contextId="x" * 128)).status_code == 200
    assert (await client.get("/v1/contexts")).json()["total"] == 1


async def test_two_users_naming_one_id_get_separate_contexts(
    keyed: httpx.AsyncClient, send: Send
) -> None:
    alice, bob = auth("alice"), auth("bob")
    a = await send("alice's", via=keyed, headers=alice, contextId="shared-id")
    b = await send("bob's", via=keyed, headers=bob, contextId="shared-id")
    assert a.status_code == b.status_code == 200, (a.text, b.text)
    a_task, b_task = a.json()["task"], b.json()["task"]
    assert b_task["artifacts"][0]["parts"][-1]["data"]["echo"]["historyMessages"] == 0
    for user, own, other in ((alice, a_task, b_task), (bob, b_task, a_task)):
        page = (await keyed.get("/v1/contexts/shared-id", headers=user)).json()
        assert [t["id"] for t in page["items"]] == [own["id"]]
        assert (await keyed.get(f"/v1/tasks/{other['id']}", headers=user)).status_code == 404
    # bob's scrub leaves alice's context alone
    assert (await keyed.delete("/v1/contexts/shared-id", headers=bob)).status_code == 204
    assert (await keyed.get("/v1/contexts/shared-id", headers=alice)).json()["total"] == 1
    r = await send("more", via=keyed, headers=alice, contextId="shared-id")
    assert r.status_code == 200, r.text


async def test_a_scrubbed_contexts_id_stays_unknown(client: httpx.AsyncClient, send: Send) -> None:
    for cid in ("named-then-scrubbed", (await send("x")).json()["task"]["contextId"]):
        assert (await send("a", contextId=cid)).status_code == 200
        assert (await client.delete(f"/v1/contexts/{cid}")).status_code == 204
        r = await send("b", contextId=cid)
        assert r.status_code == 404, r.text
        assert r.json()["error"] == "ContextNotFoundError"
        assert (await client.post("/", json=_rpc_send("c", "m", cid))).json()["error"][
            "code"
        ] == -32010
        assert (await client.get(f"/v1/contexts/{cid}")).status_code == 404


async def test_refuse_mode_keeps_server_generated_ids_only(make_app: AppFactory) -> None:
    async with make_app(client_context_ids="refuse") as c:
        body = {
            "message": {"role": "user", "messageId": "1", "parts": [{"kind": "text", "text": "x"}]}
        }
        for cid in ("app.session-42", "a b"):
            body["message"]["contextId"] = cid
            r = await c.post("/v1/message:send", json=body)
            assert r.status_code == 404, r.text
            assert r.json()["error"] == "ContextNotFoundError"
        answer = (await c.post("/", json=_rpc_send("x", "2", "app.session-42"))).json()
        assert answer["error"]["code"] == -32010
        assert (await c.get("/v1/contexts")).json()["total"] == 0


async def test_a_named_contexts_first_message_binds_its_subject(send: Send) -> None:
    r = await send("a", contextId="with-subject", metadata={"subject": "patient-1"})
    assert r.status_code == 200, r.text
    assert (await send("b", contextId="with-subject")).status_code == 200
    same = await send("c", contextId="with-subject", metadata={"subject": "patient-1"})
    assert same.status_code == 200, same.text
    other = await send("d", contextId="with-subject", metadata={"subject": "patient-2"})
    assert other.status_code == 400
    assert other.json()["data"]["errors"][0]["reason"] == "mismatch"
    unbound = await send("e", contextId="no-subject")
    assert unbound.status_code == 200
    late = await send("f", contextId="no-subject", metadata={"subject": "patient-1"})
    assert late.status_code == 400
