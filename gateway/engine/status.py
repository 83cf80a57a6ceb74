"""Pure builders of the A2A TaskStatus and Message JSON the engine stores."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.a2a import TERMINAL, settled
from gateway.clock import iso_from_ms, now_ms
from gateway.ids import new_id

__all__ = [
    "TERMINAL",
    "agent_message",
    "artifact",
    "artifact_event",
    "artifact_object",
    "joined_parts",
    "run_artifact_id",
    "settled",
    "status_json",
]


def agent_message(
    context_id: str,
    task_id: str,
    parts: Sequence[Mapping[str, Any]],
    metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "kind": "message",
        "role": "agent",
        "messageId": new_id(),
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


def artifact(
    parts: Sequence[Mapping[str, Any]], name: str | None, artifact_id: str | None = None
) -> bytes:
    return orjson.dumps(artifact_object(parts, name, artifact_id))


def artifact_object(
    parts: Sequence[Mapping[str, Any]], name: str | None, artifact_id: str | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {"artifactId": artifact_id or new_id(), "parts": list(parts)}
    if name:
        body["name"] = name
    return body


def run_artifact_id(task_id: str, seq: int, n: int) -> str:
    """The id of the ``n``-th artifact of the run of message ``seq``: the same in every
    attempt, so a run that starts over after a crash replaces what stream readers saw of
    the first attempt's artifacts instead of adding to them."""
    return _uuid5_url(f"a2a-task:{task_id}/{seq}/{n}")


_URL_NAMESPACE = uuid.NAMESPACE_URL.bytes


def _uuid5_url(name: str) -> str:
    """``str(uuid.uuid5(uuid.NAMESPACE_URL, name))`` without the ``UUID`` object (a third of
    its time): the SHA-1's first 16 bytes with the version (5) and variant (RFC 4122) set."""
    raw = bytearray(hashlib.sha1(_URL_NAMESPACE + name.encode()).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def joined_parts(
    parts: list[dict[str, Any]], more: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``parts`` followed by ``more``, a text part following a text part joined to it."""
    out = list(parts)
    for part in more:
        last = out[-1] if out else None
        if (
            last is not None
            and last.get("kind") == "text"
            and part.get("kind") == "text"
            and set(last) <= {"kind", "text"}
            and set(part) <= {"kind", "text"}
        ):
            out[-1] = {"kind": "text", "text": last["text"] + part["text"]}
        else:
            out.append(dict(part))
    return out


def artifact_event(body: Mapping[str, Any], append: bool, last_chunk: bool) -> bytes:
    """An artifact event of the task's event stream."""
    return orjson.dumps({"artifact": body, "append": append, "lastChunk": last_chunk})
