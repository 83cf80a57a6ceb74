"""Pure assembly of A2A objects from the fields the store keeps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["assemble_task", "iso_from_ms", "message_seqs", "now_ms"]


def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


def iso_from_ms(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


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
    header: bytes | str,
    status: bytes | str,
    artifacts: bytes | str | None,
    history: list[bytes | str] | list[bytes] | None,
) -> dict[str, Any]:
    task: dict[str, Any] = orjson.loads(header)
    task["status"] = orjson.loads(status)
    arts = orjson.loads(artifacts) if artifacts else []
    if arts:
        task["artifacts"] = arts
    if history is not None:
        task["history"] = [orjson.loads(m) for m in history]
    return task
