"""Push notification configs with the official a2a-sdk 1.x client against a gateway.

Run in the a2a-sdk 1.x environment: ``python a2a_1x_push.py BASE_URL API_KEY MODE WEBHOOK``
where MODE is ``jsonrpc``, ``rest`` or ``grpc`` (native 1.0). Sends a message whose configuration
carries a config for ``WEBHOOK``, then creates, gets, lists and deletes configs of the task.
Prints one JSON object: what the client saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable
from typing import Any

import httpx
from a2a.client import ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from a2a_1x_grpc import client_config
from google.protobuf.json_format import MessageToDict, ParseDict


async def _error_name(call: Awaitable[object]) -> str:
    """The type of the exception the call raised, "no error" when it raised none."""
    try:
        await call
    except Exception as exc:
        return type(exc).__name__
    return "no error"


async def scenario(base: str, key: str, mode: str, webhook: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http:
        card_json = (await http.get(f"{base}/agents/echo/.well-known/agent-card.json")).json()
        card = parse_agent_card(card_json)
        # the card offers streaming; these sends block
        client = ClientFactory(client_config(http, key, mode, streaming=False)).create(card)
        report: dict[str, Any] = {"push_capability": card.capabilities.push_notifications}
        send = ParseDict(
            {
                "message": {
                    "role": "ROLE_USER",
                    "messageId": str(uuid.uuid4()),
                    "parts": [{"text": "hello"}],
                },
                "configuration": {
                    "taskPushNotificationConfig": {"id": "sent", "url": webhook, "token": "tok-1x"}
                },
            },
            SendMessageRequest(),
        )
        task = None
        async for event in client.send_message(send):
            task = event.task
            break
        assert task is not None
        report["task_id"] = task.id
        report["state"] = MessageToDict(task)["status"]["state"]
        created = await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="made", url=webhook, token="tok-2")
        )
        report["created"] = MessageToDict(created)
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="sent")
        )
        report["got"] = MessageToDict(got)

        async def config_ids() -> list[str]:
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
            return sorted(c.id for c in listed.configs)

        report["listed"] = await config_ids()
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="sent")
        )
        report["after_delete"] = await config_ids()
        report["get_deleted"] = await _error_name(
            client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id="sent")
            )
        )
        report["refused"] = await _error_name(
            client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task.id, url="http://10.11.12.13:9/hook")
            )
        )
        return report


if __name__ == "__main__":
    out = asyncio.run(scenario(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]))
    print(json.dumps(out))
