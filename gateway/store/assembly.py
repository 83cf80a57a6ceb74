"""Pure assembly of typed results (``gateway.models``) from the fields the store keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from gateway.models import RawJson, Task

__all__ = [
    "assemble_task",
    "message_seqs",
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


def _raw(value: bytes | str) -> RawJson:
    return RawJson(value if isinstance(value, bytes) else value.encode())


def assemble_task(
    task_id: str,
    context_id: str,
    status: bytes | str,
    artifacts: bytes | str | None,
    history: Sequence[bytes | str] | None,
    metadata: bytes | str | None = None,
    agent_metadata: bytes | str | None = None,
) -> Task:
    """A Task from its stored fields, which it carries unparsed; ``history`` None leaves it
    out. The metadata is the client's, with what the agent reported (usage, remote ids)
    merged over it (parsed only when there are both)."""
    merged: RawJson | None = None
    if metadata and agent_metadata:
        merged = RawJson.of(orjson.loads(metadata) | orjson.loads(agent_metadata))
    elif metadata or agent_metadata:
        merged = _raw(metadata or agent_metadata or b"")
    return Task(
        task_id,
        context_id,
        _raw(status),
        _raw(artifacts) if artifacts and artifacts not in (b"[]", "[]") else None,
        tuple(_raw(m) for m in history) if history is not None else None,
        merged,
    )


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
