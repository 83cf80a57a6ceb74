"""A task as the services return it, and the two events of its stream: a status and an
artifact update (named tuples: one is built per event read)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from gateway.a2a import INTERRUPTED, TERMINAL
from gateway.models.raw_json import RawJson

__all__ = ["ArtifactUpdate", "StatusUpdate", "Task"]


@dataclass(frozen=True, slots=True)
class Task:
    """An A2A Task. ``status`` is a TaskStatus, ``artifacts`` a JSON array of Artifacts
    (None: none), ``history`` its Messages (None: not asked for), ``metadata`` an object
    (the client's, with what the agent reported merged over it)."""

    id: str
    context_id: str
    status: RawJson
    artifacts: RawJson | None = None
    history: tuple[RawJson, ...] | None = None
    metadata: RawJson | None = None

    @property
    def state(self) -> str:
        return str(self.status.value.get("state", ""))

    @property
    def status_timestamp(self) -> str:
        return str(self.status.value.get("timestamp", ""))

    @property
    def artifact_list(self) -> list[dict[str, Any]]:
        """The artifacts, parsed (empty when none)."""
        return list(self.artifacts.value) if self.artifacts is not None else []

    def without_artifacts(self) -> Task:
        return replace(self, artifacts=None) if self.artifacts is not None else self


# The head of a stored TaskStatus as the gateway writes it (``state`` first, compact), and
# the states it may name.
_STATE_HEAD = b'{"state":"'
_STATE_OF = {
    name.encode(): name for name in (*TERMINAL, *INTERRUPTED, "submitted", "working", "unknown")
}


class StatusUpdate(NamedTuple):
    """A status event of a task's stream: the TaskStatus as stored, and its state. (The two
    event types are named tuples, not frozen dataclasses: one is built per event a stream
    reads, and a frozen dataclass's ``__init__`` costs about 1 µs more.)"""

    status: RawJson
    state: str

    @classmethod
    def read(cls, raw: bytes) -> StatusUpdate:
        """The event from its stored bytes: the state read off their head when they start
        with it (they do as the gateway writes them), else parsed."""
        status = RawJson(raw)
        if raw.startswith(_STATE_HEAD):
            state = _STATE_OF.get(raw[len(_STATE_HEAD) : raw.find(b'"', len(_STATE_HEAD))])
            if state is not None:
                return cls(status, state)
        value = status.value
        return cls(status, str(value.get("state", "")) if isinstance(value, dict) else "")


class ArtifactUpdate(NamedTuple):
    """An artifact event of a task's stream: ``{"artifact", "append", "lastChunk"}`` as
    stored (an object, those members in that order)."""

    update: RawJson

    @property
    def artifact(self) -> dict[str, Any]:
        return dict(self.update.value["artifact"])

    @property
    def append(self) -> bool:
        return bool(self.update.value.get("append"))

    @property
    def last_chunk(self) -> bool:
        return bool(self.update.value.get("lastChunk"))
