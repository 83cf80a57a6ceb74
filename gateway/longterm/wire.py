"""The outbox's entries on ``gw:{jobs}:ltm``: ids and store options, never content.

A store entry (``job``: ``{t, u, c, k, o}``, ``seq``) names a finished turn: the user
message at ``seq`` of task ``k`` and the replies after it. A forget entry (``job``:
``{t, u, c, w}``, ``forget``: comma-separated memory ids, maybe none) names memories to
delete (``w``: and the context's session to sweep). Either holds ``s``, the context's
subject, sealed as in its meta, when it has one. When tracing is on, ``job`` also holds
``tp``, the traceparent of the span that built it (the run, or the scrub), so the delivery
continues that trace. The scripts write the ``seq`` and ``forget`` fields; this module
writes ``job`` and reads all. The entry's field names are defined once, in ``store/fields.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway import tracing
from gateway.options.longterm import MemoryOptions
from gateway.store.fields import ENTRY_FORGET, ENTRY_JOB, ENTRY_SEQ

__all__ = ["OutboxJob", "forget_job", "store_job"]

_JOB, _SEQ, _FORGET = ENTRY_JOB.encode(), ENTRY_SEQ.encode(), ENTRY_FORGET.encode()


def _traced(fields: dict[str, Any]) -> bytes:
    tp = tracing.traceparent()
    if tp:
        fields["tp"] = tp
    return orjson.dumps(fields)


def store_job(
    tenant: str, user: str, context_id: str, task_id: str, o: MemoryOptions, subject: str = ""
) -> bytes:
    options = {
        "tags": o.tags,
        "project": o.project,
        "agent": o.is_agent_memory,
        "app": o.app_name,
        "data": o.include_data,
    }
    fields: dict[str, Any] = {"t": tenant, "u": user, "c": context_id, "k": task_id, "o": options}
    if subject:
        fields["s"] = subject
    return _traced(fields)


def forget_job(
    tenant: str, user: str, context_id: str, scrub: str = "", subject: str = ""
) -> bytes:
    """A scrub's deletion job (``w``: it also sweeps the context's session); ``scrub`` is
    its request id, named in the audit entry of the deletion."""
    fields: dict[str, Any] = {"t": tenant, "u": user, "c": context_id, "w": 1}
    if scrub:
        fields["r"] = scrub
    if subject:
        fields["s"] = subject
    return _traced(fields)


@dataclass(frozen=True)
class OutboxJob:
    entry: str
    fields: dict[bytes, bytes]
    tenant: str
    user: str
    context_id: str
    task_id: str
    seq: int
    options: dict[str, Any]
    forget: tuple[str, ...]
    trace: str = ""  # the traceparent of the span that queued it
    scrub: str = ""  # a deletion's scrub (its request id)
    subject: str = ""  # the context's subject, sealed as in its meta ("": none)
    sweep: bool = False  # a scrub's job: also delete what Cortadel holds for the session

    @property
    def forgets(self) -> bool:
        """A deletion job (else a store job)."""
        return bool(self.forget) or self.sweep

    @classmethod
    def from_wire(cls, entry: str, fields: dict[bytes, bytes]) -> OutboxJob:
        raw = orjson.loads(fields[_JOB])
        forget = tuple(i for i in fields.get(_FORGET, b"").decode().split(",") if i)
        return cls(
            entry,
            fields,
            raw["t"],
            raw["u"],
            raw["c"],
            raw.get("k", ""),
            int(fields.get(_SEQ, b"0")),
            raw.get("o") or {},
            forget,
            str(raw.get("tp") or ""),
            str(raw.get("r") or ""),
            str(raw.get("s") or ""),
            bool(raw.get("w")),
        )
