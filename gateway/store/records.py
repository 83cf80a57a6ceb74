"""Pure assembly of A2A objects from the fields the store keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.clock import iso_from_ms, now_ms

__all__ = [
    "assemble_task",
    "iso_from_ms",
    "message_seqs",
    "now_ms",
    "text_of",
    "with_open_artifact",
]


def text_of(value: Any) -> str:
    """A Redis reply (bytes) or a plain value, as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def message_seqs(raw: bytes | str | None, last: int | None = None) -> list[bytes]:
    """The message sequence numbers of a task, optionally only the last ``last``."""
    if not raw:
        return []
    text = raw if isinstance(raw, bytes) else raw.encode()
    seqs = text.split(b",")
    if last is not None:
        seqs = seqs[-last:] if last > 0 else []
    return seqs


def assemble_task(
    task_id: str,
    context_id: str,
    status: bytes | str,
    artifacts: bytes | str | None,
    history: Sequence[bytes | str] | None,
    metadata: bytes | str | None = None,
    agent_metadata: bytes | str | None = None,
) -> dict[str, Any]:
    """An A2A Task from its stored fields; ``history`` None leaves it out. The metadata is
    the client's, with what the agent reported (usage, remote ids) merged over it."""
    task: dict[str, Any] = {
        "id": task_id,
        "contextId": context_id,
        "kind": "task",
        "status": orjson.loads(status),
    }
    if artifacts and artifacts not in (b"[]", "[]"):
        task["artifacts"] = orjson.loads(artifacts)
    if history is not None:
        task["history"] = [orjson.loads(m) for m in history]
    if metadata or agent_metadata:
        merged = orjson.loads(metadata) if metadata else {}
        if agent_metadata:
            merged.update(orjson.loads(agent_metadata))
        task["metadata"] = merged
    return task


def with_open_artifact(
    artifacts: bytes | str | None, open_artifact: bytes | str | None
) -> bytes | str | None:
    """The task's stored artifacts with the one still being streamed after them."""
    if not open_artifact:
        return artifacts
    if isinstance(artifacts, str):
        artifacts = artifacts.encode()
    if isinstance(open_artifact, str):
        open_artifact = open_artifact.encode()
    if not artifacts or artifacts == b"[]":
        return b"[" + open_artifact + b"]"
    return artifacts[:-1] + b"," + open_artifact + b"]"
