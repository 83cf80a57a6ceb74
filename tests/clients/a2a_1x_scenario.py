"""A user's session with the official a2a-sdk 1.x client against a gateway.

Run in its own environment (a2a-sdk 1.x cannot share one with the gateway's 0.3):
``python a2a_1x_scenario.py BASE_URL API_KEY MODE`` where MODE is ``jsonrpc``, ``rest`` or
``grpc`` (native 1.0, chosen from the card's ``supportedInterfaces``) or ``compat-jsonrpc`` /
``compat-rest`` (the SDK's v0.3 compatibility transports, as it picks them for a card
without ``supportedInterfaces``). Prints one JSON object: what the client saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from typing import Any

import httpx
from a2a.client import ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a_1x_grpc import client_config, transport_name
from google.protobuf.json_format import MessageToDict, ParseDict

VITALS = {
    "patient": {"name": "Zoë Ångström 患者", "age": 72, "weight": 71.5},
    "readings": [{"hr": 88, "spo2": 0.97}, {"hr": 91, "flags": [True, False, None]}],
    "emoji": "🩺",
}


def request(*parts: dict[str, Any], **message: Any) -> SendMessageRequest:
    body = {
        "message": {
            "role": "ROLE_USER",
            "messageId": str(uuid.uuid4()),
            "parts": list(parts) or [{"text": "hello"}],
            **message,
        }
    }
    return ParseDict(body, SendMessageRequest())


async def send(client: Any, req: SendMessageRequest) -> Any:
    async for event in client.send_message(req):
        return event.task
    raise AssertionError("no answer")


def plain(task: Any) -> dict[str, Any]:
    out: dict[str, Any] = MessageToDict(task)
    return out


def error_name(exc: BaseException) -> str:
    return type(exc).__name__


async def data_values(client: Any) -> Any:
    """1.0 data parts hold any JSON value, not only an object: sent, read back."""
    valued = await send(client, request({"data": [1, "two", None]}, {"data": "text"}))
    got = plain(await client.get_task(GetTaskRequest(id=valued.id)))
    return got["history"][0]["parts"]


STREAMED = "Chunks of a longer answer, as the agent produces them."


async def streams(report: dict[str, Any], client: Any, polling: Any, streaming: Any) -> None:
    """A streaming send, subscribing to the ended task, and subscribing mid-run."""
    chunked = {"echo": {"chunks": 4, "delayMs": 200}}
    events = streaming.send_message(request({"text": STREAMED}, metadata=chunked))
    report["stream"] = [MessageToDict(e) async for e in events]
    task_id = report["stream"][0]["task"]["id"]
    report["stream_stored"] = plain(await client.get_task(GetTaskRequest(id=task_id)))
    try:
        ended = streaming.subscribe(SubscribeToTaskRequest(id=task_id))
        report["subscribe_ended"] = [MessageToDict(e) async for e in ended]
    except Exception as exc:
        report["subscribe_ended"] = error_name(exc)
    slow = {"echo": {"chunks": 4, "delayMs": 1600}}
    sent = await send(polling, request({"text": STREAMED}, metadata=slow))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        task = await client.get_task(GetTaskRequest(id=sent.id))
        if any(a.name == "echo-stream" for a in task.artifacts):
            break
        await asyncio.sleep(0.05)
    resumed = streaming.subscribe(SubscribeToTaskRequest(id=sent.id))
    report["resubscribed"] = [MessageToDict(e) async for e in resumed]


async def scenario(base: str, key: str, mode: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card_json = (await http.get(f"{base}/agents/echo/.well-known/agent-card.json")).json()
        if mode.startswith("compat"):
            card_json.pop("supportedInterfaces")  # a 0.3-only card
        card = parse_agent_card(card_json)
        # Blocking and polling sends (the card offers streaming, which the client would
        # otherwise use for every send), and a streaming client.
        client = ClientFactory(client_config(http, key, mode, streaming=False)).create(card)
        polling = ClientFactory(
            client_config(http, key, mode, polling=True, streaming=False)
        ).create(card)
        streaming = ClientFactory(client_config(http, key, mode)).create(card)
        report: dict[str, Any] = {"transport": transport_name(client)}

        first = await send(client, request({"data": VITALS}))
        report["first"] = plain(first)
        second = await send(
            client,
            request(contextId=first.context_id, referenceTaskIds=[first.id]),
        )
        report["second"] = plain(second)

        for name, length in (("history_none", 0), ("history_one", 1), ("history_all", None)):
            get = GetTaskRequest(id=first.id)
            if length is not None:
                get.history_length = length
            report[name] = plain(await client.get_task(get))

        slow = await send(polling, request(metadata={"echo": {"delayMs": 400}}))
        report["polled_first_state"] = TaskState.Name(slow.status.state)
        deadline = time.monotonic() + 30
        state = slow.status.state
        while state != TaskState.TASK_STATE_COMPLETED and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            state = (await client.get_task(GetTaskRequest(id=slow.id))).status.state
        report["polled_final_state"] = TaskState.Name(state)

        working = await send(polling, request(metadata={"echo": {"finalState": "working"}}))
        canceled = await client.cancel_task(CancelTaskRequest(id=working.id))
        report["canceled_state"] = TaskState.Name(canceled.status.state)

        try:
            await client.get_task(GetTaskRequest(id="no-such-task"))
            report["not_found"] = "no error"
        except Exception as exc:
            report["not_found"] = error_name(exc)
        try:
            await client.get_task(GetTaskRequest(id=first.id, history_length=-1))
            report["invalid"] = "no error"
        except Exception as exc:
            report["invalid"] = error_name(exc)

        await streams(report, client, polling, streaming)

        if not mode.startswith("compat"):
            report["values"] = await data_values(client)
            pages: list[list[str]] = []
            token = ""
            while True:
                listed = await client.list_tasks(
                    ListTasksRequest(context_id=first.context_id, page_size=1, page_token=token)
                )
                pages.append([t.id for t in listed.tasks])
                report["total_size"] = listed.total_size
                token = listed.next_page_token
                if not token or len(pages) > 5:
                    break
            report["pages"] = pages
            everything = await client.list_tasks(ListTasksRequest())
            report["all_ids"] = [t.id for t in everything.tasks]
        return report


if __name__ == "__main__":
    result = asyncio.run(scenario(sys.argv[1], sys.argv[2], sys.argv[3]))
    print(json.dumps(result))
