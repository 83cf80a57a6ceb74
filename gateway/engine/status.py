"""Pure builders of the A2A TaskStatus and Message JSON the engine stores."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.states import TERMINAL, settled
from gateway.store.records import iso_from_ms, now_ms

__all__ = ["TERMINAL", "agent_message", "artifact", "settled", "status_json"]


def agent_message(
    context_id: str,
    task_id: str,
    parts: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "kind": "message",
        "role": "agent",
        "messageId": str(uuid.uuid4()),
        "contextId": context_id,
        "taskId": task_id,
        "parts": list(parts),
    }
    if metadata:
        message["metadata"] = dict(metadata)
    return message


def status_json(
    state: str, context_id: str = "", task_id: str = "", text: str | None = None
) -> bytes:
    status: dict[str, Any] = {"state": state, "timestamp": iso_from_ms(now_ms())}
    if text:
        status["message"] = agent_message(context_id, task_id, [{"kind": "text", "text": text}])
    return orjson.dumps(status)


def artifact(parts: Sequence[Mapping[str, Any]], name: str | None) -> bytes:
    body: dict[str, Any] = {"artifactId": str(uuid.uuid4()), "parts": list(parts)}
    if name:
        body["name"] = name
    return orjson.dumps(body)
