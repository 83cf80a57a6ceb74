"""The A2A 0.3 proto-JSON dialect on the wire (``{base}/a2a/v1/...``), both ways: what a
client sends in the 0.3 proto's spelling is what it reads back, over the real app."""

from __future__ import annotations

from typing import Any

import httpx

SEND = "/a2a/v1/message:send"


async def send(
    c: httpx.AsyncClient, content: list[dict[str, Any]], message_id: str, **fields: Any
) -> Any:
    """A blocking send of a user message in the 0.3 proto's spelling; the task answered."""
    request = {"messageId": message_id, "role": "ROLE_USER", "content": content, **fields}
    r = await c.post(SEND, json={"request": request, "configuration": {"blocking": True}})
    assert r.status_code == 200, r.text
    return r.json()["task"]


async def test_parts_round_trip(client: httpx.AsyncClient) -> None:
    content: list[dict[str, Any]] = [
        {"text": "see attached", "metadata": {"lang": "en"}},
        {"data": {"data": {"hr": 72, "nested": {"bp": [120, 80]}, "name": "Zoë"}}},
        {"data": {"data": {}}, "metadata": {"source": "monitor"}},
    ]
    task = await send(client, content, message_id="p1", metadata={"ward": "3b"})
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    full = (await client.get(f"/a2a/v1/tasks/{task['id']}")).json()
    sent = full["history"][0]
    assert sent == {
        "messageId": "p1",
        "role": "ROLE_USER",
        "content": content,
        "contextId": task["contextId"],
        "taskId": task["id"],
        "metadata": {"ward": "3b"},
    }
    assert full["history"][1]["role"] == "ROLE_AGENT"
    # The same message over the canonical REST: kinds, and the data part's object unnested.
    canonical = (await client.get(f"/v1/tasks/{task['id']}")).json()["history"][0]["parts"]
    assert canonical[1] == {"kind": "data", "data": content[1]["data"]["data"]}


async def test_files_are_read_by_proto_field_names_and_written_in_proto_json(
    client: httpx.AsyncClient,
) -> None:
    by_uri = {"file_with_uri": "https://files.example/ecg.pdf", "mime_type": "application/pdf"}
    inline = {"file_with_bytes": "aGVsbG8=", "mime_type": "text/plain", "name": "note.txt"}
    task = await send(client, [{"file": by_uri}, {"file": inline}], message_id="p2")
    content = (await client.get(f"/a2a/v1/tasks/{task['id']}")).json()["history"][0]["content"]
    assert content == [
        {"file": {"fileWithUri": by_uri["file_with_uri"], "mimeType": "application/pdf"}},
        {"file": {"fileWithBytes": "aGVsbG8=", "mimeType": "text/plain", "name": "note.txt"}},
    ]


async def test_files_in_proto3_json_names_round_trip(client: httpx.AsyncClient) -> None:
    """proto3 JSON: a parser accepts a field's lowerCamelCase name as well as its proto name,
    and protobuf's own printer (what a 0.3 SDK's REST client sends) uses the former."""
    content = [
        {"file": {"fileWithUri": "https://files.example/ecg.pdf", "mimeType": "application/pdf"}},
        {"file": {"fileWithBytes": "aGVsbG8=", "mimeType": "text/plain", "name": "note.txt"}},
    ]
    task = await send(client, content, message_id="p2c")
    read = (await client.get(f"/a2a/v1/tasks/{task['id']}")).json()["history"][0]["content"]
    assert read == content


async def test_states_are_the_0_3_proto_enums(client: httpx.AsyncClient) -> None:
    body = {
        "request": {
            "messageId": "p3",
            "role": "ROLE_USER",
            "content": [{"text": "w"}],
            "metadata": {"echo": {"finalState": "working"}},
        }
    }
    r = await client.post(SEND, json=body)  # without configuration.blocking: no wait
    assert r.status_code == 200, r.text
    task = r.json()["task"]
    assert task["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    canceled = (await client.post(f"/a2a/v1/tasks/{task['id']}:cancel")).json()
    assert canceled["status"]["state"] == "TASK_STATE_CANCELLED"
