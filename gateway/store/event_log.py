"""Reads of a task's event stream (``<context meta>:ev:<task id>``), the log SSE readers
follow on any replica. A task is logged from its first reader on (``snapshot`` marks it):
from then the context scripts write each change to the stream in the same step as the
change itself (``emit`` in ``lua/prelude.py``), so an event is in the log exactly when its change
is in the task; its entry ids order a task's events and are the SSE ``id``s. A task no one
follows (most blocking sends) writes no log at all."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from gateway.models import ArtifactUpdate, RawJson, StatusUpdate, Task
from gateway.principal import Principal
from gateway.store.assembly import message_seqs
from gateway.store.assembly import text_of as _text
from gateway.store.fields import (
    EVENT_ARTIFACT,
    EVENT_DATA,
    EVENT_KIND,
    EVENT_STATUS,
    EVENTS_SEAL,
    LOGGED,
    NO_EVENT,
    STATUS,
    task_field,
)
from gateway.store.keys import UserKeys, event_stream, keys_of
from gateway.store.lua.context import SNAPSHOT_FIELDS, SnapshotArgs, snapshot_reply
from gateway.store.redis_store import Store
from gateway.store.translate import translated as _translated

__all__ = ["Decoder", "EventLog", "LoggedEvent", "event_id", "position"]

_ID = re.compile(r"\d{1,20}-\d{1,20}")
_KINDS: dict[bytes, Literal["status", "artifact"]] = {
    EVENT_STATUS.encode(): "status",
    EVENT_ARTIFACT.encode(): "artifact",
}
_KIND, _DATA = EVENT_KIND.encode(), EVENT_DATA.encode()


def event_id(raw: str | None) -> str | None:
    """A client's ``Last-Event-ID`` when it is one of ours (a stream entry id), else None."""
    if raw is None:
        return None
    raw = raw.strip()
    return raw if _ID.fullmatch(raw) else None


def _key(keys: UserKeys, context_id: str, task_id: str) -> str:
    return event_stream(keys.meta(context_id), task_id)


def position(entry_id: str) -> tuple[int, int]:
    """An entry id as a pair that sorts as the log does."""
    ms, _, n = entry_id.partition("-")
    return int(ms), int(n)


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    id: str
    kind: Literal["status", "artifact"]
    data: StatusUpdate | ArtifactUpdate  # the stored bytes, unparsed
    size: int = 0  # bytes as logged (what a reader's buffer counts)


# A logged entry (its id, its fields) made an event; one per task (its user, its context).
Decoder = Callable[[str, dict[bytes, bytes]], LoggedEvent]


class EventLog:
    def __init__(self, store: Store) -> None:
        self._store = store

    def key(self, principal: Principal, context_id: str, task_id: str) -> str:
        """The task's log (a Redis stream)."""
        keys = keys_of(principal)
        return _key(keys, context_id, task_id)

    def decoder(self, principal: Principal, context_id: str, task_id: str) -> Decoder:
        """How the task's logged entries become events (opened as the task is sealed)."""
        keys = keys_of(principal)
        store = self._store
        fields_of = {
            "status": task_field(task_id, STATUS),
            "artifact": task_field(task_id, EVENTS_SEAL),
        }

        def decode(entry_id: str, fields: dict[bytes, bytes]) -> LoggedEvent:
            kind = _KINDS[fields[_KIND]]
            raw = fields[_DATA]
            data = store._open(keys, context_id, fields_of[kind], raw)  # sealed like the task
            update = StatusUpdate.read(data) if kind == "status" else ArtifactUpdate(RawJson(data))
            return LoggedEvent(entry_id, kind, update, len(raw))

        return decode

    @_translated
    async def snapshot(
        self, principal: Principal, context_id: str, task_id: str
    ) -> tuple[Task | None, str]:
        """The task as it stands (whole history, the artifact being streamed included) and
        the id of the last event it includes (``NO_EVENT`` when none), read at one instant;
        from then on the task's changes are logged."""
        keys = keys_of(principal)
        ck = keys.context(context_id)
        fields = [task_field(task_id, suffix) for suffix in SNAPSHOT_FIELDS]
        reply = snapshot_reply(
            await self._store.scripts.snapshot(
                keys=[ck.tasks, _key(keys, context_id, task_id)],
                args=SnapshotArgs(task_field(task_id, LOGGED), fields).argv(),
            )
        )
        if reply.status is None:
            return None, reply.last_event
        wanted = message_seqs(reply.messages, None)
        history: list[bytes] = []
        if wanted:
            found = await self._store.client.hmget(ck.msgs, wanted)
            history = self._store._history(keys, context_id, wanted, found)
        stored = (reply.status, reply.artifacts, reply.metadata, reply.agent_metadata)
        task = self._store._task(keys, context_id, task_id, stored, history, reply.open_artifact)
        return task, reply.last_event

    @_translated
    async def after(
        self, principal: Principal, context_id: str, task_id: str, after: str, count: int
    ) -> list[LoggedEvent]:
        """Up to ``count`` events after the id ``after``, oldest first."""
        keys = keys_of(principal)
        raw: list[tuple[bytes, dict[bytes, bytes]]] = await self._store.client.xrange(  # type: ignore[assignment]
            _key(keys, context_id, task_id), f"({after}", "+", count=count
        )
        decode = self.decoder(principal, context_id, task_id)
        return [decode(_text(entry_id), fields) for entry_id, fields in raw]

    @_translated
    async def kept_since(
        self, principal: Principal, context_id: str, task_id: str, after: str
    ) -> bool:
        """Whether the log still holds every event after ``after``: the stream has lived
        since then (a stream is never trimmed, only expired or deleted whole, so a first
        entry later than ``after`` means what came between is gone). ``NO_EVENT`` is a
        snapshot's of a task whose log was empty: the log holds what came after it when the task is
        logged (the snapshot marked it, and a log, once begun, lasts while events can come)."""
        keys = keys_of(principal)
        first = await self._store.client.xrange(_key(keys, context_id, task_id), count=1)
        if not first:
            return False
        if after == NO_EVENT:
            flag = task_field(task_id, LOGGED)
            return bool(await self._store.client.hexists(keys.context(context_id).tasks, flag))
        return position(_text(first[0][0])) <= position(after)
