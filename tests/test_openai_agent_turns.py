"""The `openai` agent against an OpenAI-compatible server that validates every request and
replies from a script: what a turn sends (history, references, data and files, cut to the
token budget), JSON output, retries, failures, the allowlist at call time, streamed answers,
and the test server refusing what the API refuses."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from tests.conftest import API_KEYS, AppFactory, auth, message
from tests.openai_agent_gateway import SYSTEM, send, text_of
from tests.openai_agent_gateway import chat as chat
from tests.openai_agent_gateway import gateway as gateway
from tests.openai_server import ChatServer
from tests.sse import collect


async def test_a_turn_with_history_references_data_and_files(
    gateway: Any, chat: ChatServer
) -> None:
    chat.script = [{"content": "Stay: 3 days, pneumonia."}, {"content": "Letter drafted."}]
    note = base64.b64encode(b"Discharged home on amoxicillin.").decode()
    async with gateway() as c:
        first = await send(c, "Summarise the stay.")
        second = await send(
            c,
            "Draft the letter.",
            {"kind": "data", "data": {"ward": "7B", "days": 3}},
            {"kind": "file", "file": {"name": "note.txt", "mimeType": "text/plain", "bytes": note}},
            {"kind": "file", "file": {"name": "scan.png", "mimeType": "image/png",
                                      "uri": "https://pacs.example/1"}},
            contextId=first["contextId"],
            referenceTaskIds=[first["id"]],
        )  # fmt: skip
        stored = (await c.get(f"/agents/llm/v1/tasks/{second['id']}", headers=auth("alice"))).json()
    assert first["status"]["state"] == "completed" and text_of(first) == "Stay: 3 days, pneumonia."
    assert second["status"]["state"] == "completed" and text_of(second) == "Letter drafted."
    assert chat.requests[0]["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Summarise the stay."},
    ]
    assert chat.requests[1]["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Summarise the stay."},
        {"role": "assistant", "content": "Stay: 3 days, pneumonia."},
        {
            "role": "user",
            "content": (
                f"[Referenced task {first['id']} — state: completed]\n"
                'Artifact "response":\nStay: 3 days, pneumonia.\n'
                f"[End of referenced task {first['id']}]\n\n"
                "Draft the letter.\n\n"
                '```json\n{\n  "days": 3,\n  "ward": "7B"\n}\n```\n\n'
                "[File: note.txt (text/plain)]\n```\nDischarged home on amoxicillin.\n```\n\n"
                "[File: scan.png (image/png) at https://pacs.example/1, not shown]"
            ),
        },
    ]
    assert chat.requests[1]["model"] == "test-model"
    assert chat.requests[1]["tools"][0]["function"]["name"] == "search_memory"  # memory is on
    assert chat.auth[0] == "Bearer sk-test"
    # the reply is an agent message and an artifact; usage is in the task's metadata
    assert stored["history"][-1]["role"] == "agent"
    assert stored["history"][-1]["parts"] == [{"kind": "text", "text": "Letter drafted."}]
    usage = stored["metadata"]["usage"]
    assert usage["calls"] == 1 and usage["completionTokens"] == 7 and usage["totalTokens"] > 7
    assert second["metadata"]["usage"] == usage  # the blocking answer carries it too


async def test_history_is_cut_to_the_token_budget_oldest_first(
    gateway: Any, chat: ChatServer
) -> None:
    async with gateway({"historyTokenBudget": 120}) as c:
        first = await send(c, "a" * 200)  # 50 tokens each way ('ok' replies are 1)
        for n in range(3):
            await send(c, str(n) * 200, contextId=first["contextId"])
        await send(c, "last", contextId=first["contextId"])
    sent = chat.requests[-1]["messages"]
    assert sent[0]["role"] == "system"
    assert (
        sent[0]["content"]
        == f"{SYSTEM}\n\nNote: 4 earlier message(s) of this conversation were omitted."
    )
    assert [m["content"] for m in sent[1:]] == ["1" * 200, "ok", "2" * 200, "ok", "last"]


async def test_json_output_mode(gateway: Any, chat: ChatServer) -> None:
    chat.script = [{"content": '{"diagnosis": "pneumonia", "icd10": "J18.9"}'}]
    async with gateway() as c:
        done = await send(
            c, "Code it.", configuration={"acceptedOutputModes": ["application/json"]}
        )
    assert chat.requests[0]["response_format"] == {"type": "json_object"}
    assert done["artifacts"][0]["parts"] == [
        {"kind": "data", "data": {"diagnosis": "pneumonia", "icd10": "J18.9"}}
    ]


async def test_rate_limits_are_retried(gateway: Any, chat: ChatServer) -> None:
    chat.script = [{"status": 429}, {"status": 503}, {"content": "Finally."}]
    async with gateway({"maxRetries": 2}) as c:
        done = await send(c, "Hello?")
    assert text_of(done) == "Finally." and len(chat.requests) == 3


@pytest.mark.parametrize(
    ("script", "config", "reason"),
    [
        ([{"delay": 2.0}, {"content": "late"}], {"timeoutSeconds": 0.3}, "did not answer in time"),
        ([{"refusal": "I cannot help with that."}], {}, "declined to answer"),
        ([{"status": 500}], {}, "refused the request (status 500)"),
    ],
)
async def test_failures_end_the_task_failed_with_a_safe_message(
    gateway: Any, chat: ChatServer, script: list[dict[str, Any]], config: dict[str, Any],
    reason: str,
) -> None:  # fmt: skip
    chat.script = script
    async with gateway(config) as c:
        done = await send(c, "Hello?")
    assert done["status"]["state"] == "failed"
    assert reason in done["status"]["message"]["parts"][0]["text"]


async def test_unreachable_endpoint(gateway: Any, chat: ChatServer) -> None:
    async with gateway() as c:
        chat.stop()
        done = await send(c, "Anyone?")
    assert done["status"]["state"] == "failed"
    assert "could not be reached" in done["status"]["message"]["parts"][0]["text"]


async def test_the_allowlist_is_checked_again_at_call_time(
    gateway: Any, chat: ChatServer, make_app: AppFactory
) -> None:
    keys = orjson.dumps(API_KEYS).decode()
    async with gateway():
        pass  # registered while the allowlist allowed it
    async with make_app(api_keys=keys, outbound_allowlist="127.0.0.1:1") as narrower:
        r = await narrower.post(
            "/agents/llm/v1/message:send", json={"message": message("hi")}, headers=auth("alice")
        )
    task = r.json()["task"]
    assert task["status"]["state"] == "failed"
    assert "allowlist" in task["status"]["message"]["parts"][0]["text"]
    assert chat.requests == []


def test_the_test_server_refuses_what_the_api_refuses() -> None:
    """The stand-in's checks are real: each of these bodies breaks the API's rules."""
    from tests.openai_server import problems_of

    good = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert problems_of(good, "m") == []
    bad = [
        {**good, "model": "other"},
        {"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "c"}]},
        {"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": "{}"}]},
        {"model": "m", "messages": [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "user", "content": "skipped the tool answer"},
        ]},
        {"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        {**good, "response_format": {"type": "yaml"}},
    ]  # fmt: skip
    assert all(problems_of(body, "m") for body in bad)


async def test_the_answer_streams_as_artifact_chunks(gateway: Any, chat: ChatServer) -> None:
    answer = "Stay: 3 days. Pneumonia, treated; home on amoxicillin, review in a week."
    chat.script = [{"content": answer}, {"content": "Not streamed."}]
    async with gateway() as c:
        body = {"message": message("Summarise the stay.")}
        async with c.stream("POST", "/agents/llm/v1/message:stream", json=body,
                            headers=auth("alice")) as r:  # fmt: skip
            got = await collect(r)
        chunks = [e.data for e in got if e.data.get("kind") == "artifact-update"]
        tid = got[0].data["id"]
        stored = (await c.get(f"/agents/llm/v1/tasks/{tid}", headers=auth("alice"))).json()
        # Streaming off: one artifact at the end, a plain request.
        off = {"config": {"stream": False}}
        assert (await c.patch("/agents/llm", json=off, headers=auth("admin"))).status_code == 200
        streamed = list(chat.streamed)
        done = await send(c, "Again.")
    assert "stream" not in chat.requests[-1] and chat.streamed == streamed
    assert text_of(done) == "Not streamed."
    assert chat.requests[0]["stream"] is True
    # The model's pieces, in order, one artifact; the last chunk closes it. On a busy host
    # the run may have streamed its first pieces before the stream began: the first event
    # (the task) then holds them, and every chunk after it appends.
    held = "".join(p["text"] for a in got[0].data.get("artifacts") or [] for p in a["parts"])
    pieces = [c["artifact"]["parts"][0]["text"] for c in chunks if c["artifact"]["parts"]]
    assert held + "".join(pieces) == "".join(streamed) and len(pieces) > 3
    assert streamed[-len(pieces) :] == pieces
    assert [c["append"] for c in chunks] == [bool(held)] + [True] * (len(chunks) - 1)
    assert chunks[-1]["lastChunk"] and not any(c["lastChunk"] for c in chunks[:-1])
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    assert got[-1].data["status"]["state"] == "completed"
    # Stored once: the concatenation, and the same text as the agent's reply.
    assert stored["artifacts"] == [
        {"artifactId": chunks[0]["artifact"]["artifactId"], "name": "response",
         "parts": [{"kind": "text", "text": answer}]}
    ]  # fmt: skip
    assert stored["history"][-1]["parts"] == [{"kind": "text", "text": answer}]
    assert stored["metadata"]["usage"]["completionTokens"] == 7
