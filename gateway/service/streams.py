"""Live task events: a streaming send and (re)subscription to a task, from any replica.

A reader starts from a snapshot of the task (the first event, carrying the id of the last
logged event it includes) or from a ``Last-Event-ID`` the task's log still holds, then reads
the log (``store/event_log.py``) after its cursor. It reads only as fast as its consumer
takes events, so a slow or stalled client holds at most one batch plus its socket's buffer
and never slows the run or other readers; what it has not taken stays in Redis. It waits
for news on the task's pub/sub signal (``TaskEvents.signal``), polling the log once per
keep-alive interval in case a notification was lost. The stream ends after a terminal or
interrupted state, or when the task is gone (scrubbed). A client that goes away stops its
reader only: the run goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal

from gateway.a2a import settled
from gateway.agents.base import Agent
from gateway.engine.events import TaskEvents
from gateway.errors import TaskNotFoundError, UnsupportedOperationError
from gateway.models import ArtifactUpdate, SendMessageRequest, StatusUpdate, Task
from gateway.principal import Principal
from gateway.service.messages import MessageService
from gateway.store.event_log import EventLog, LoggedEvent, event_id
from gateway.store.keys import UserKeys, keys_of
from gateway.store.redis_store import Store

__all__ = ["StreamEvent", "StreamService", "TaskStream"]

BATCH = 100  # events read from the log at a time (a reader's buffer, at most)


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of a task's stream. ``data`` is the Task (``task``), a ``StatusUpdate``
    (``status``) or an ``ArtifactUpdate`` (``artifact``): the latter two carry the logged
    bytes unparsed, for the serializers to write."""

    id: str
    kind: Literal["task", "status", "artifact"]
    data: Task | StatusUpdate | ArtifactUpdate
    task_id: str
    context_id: str

    @property
    def final(self) -> bool:
        """Whether the stream ends with this event (a terminal or interrupted state)."""
        if isinstance(self.data, Task | StatusUpdate):
            return settled(self.data.state)
        return False


# What a stream yields: events, and None where a keep-alive is due.
TaskStream = AsyncIterator[StreamEvent | None]


class StreamService:
    def __init__(
        self,
        store: Store,
        events: TaskEvents,
        messages: MessageService,
        keepalive_seconds: float,
    ) -> None:
        self._store, self._events, self._messages = store, events, messages
        self._log = EventLog(store)
        self._keepalive = keepalive_seconds
        self._readers: set[asyncio.Event] = set()
        self._closing = False

    def close(self) -> None:
        """End every stream of this process (the server is stopping): each ends after the
        event it is writing, and its client resubscribes, with its Last-Event-ID, elsewhere."""
        self._closing = True
        for news in self._readers:
            news.set()

    async def send(
        self, principal: Principal, agent: Agent, request: SendMessageRequest
    ) -> tuple[Task, TaskStream]:
        """Store the message as a send does (refusals raise here, before any event), then
        follow its task: first the task, then its events until the turn ends. Returns the
        task as the send stored it, and the stream."""
        config = request.configuration.model_copy(update={"blocking": False})
        request = request.model_copy(update={"configuration": config})
        task = await self._messages.send(principal, agent, request)
        return task, await self.subscribe(principal, task.id, None)

    async def subscribe(
        self,
        principal: Principal,
        task_id: str,
        last_event_id: str | None,
        *,
        terminal: bool = True,
    ) -> TaskStream:
        """The task's events after ``last_event_id`` when its log still holds them (none
        missed, none repeated), else the task as it stands first. Not found: another user's
        task as well. ``terminal`` False: a task already ended is ``UnsupportedOperationError``
        (A2A 1.0) rather than its final state."""
        keys = keys_of(principal)
        context_id = await self._store.task_context(keys, task_id)
        if context_id is None:
            raise TaskNotFoundError()
        after = event_id(last_event_id)
        first: StreamEvent | None = None
        if after is None or not await self._log.kept_since(keys, context_id, task_id, after):
            task, after = await self._log.snapshot(keys, context_id, task_id)
            if task is None:
                raise TaskNotFoundError()
            first = StreamEvent(after, "task", task, task_id, context_id)
            if first.final and not terminal:
                raise UnsupportedOperationError(
                    f"The task is {task.state}: there is nothing to subscribe to"
                )
        return self._follow(keys, context_id, task_id, after, first)

    async def _ended(
        self, keys: UserKeys, context_id: str, task_id: str, cursor: str
    ) -> list[LoggedEvent] | None:
        """None while the task may still change; once it has ended (or is gone), the events
        logged since the read that found nothing new (its final state may be among them)."""
        state = await self._store.task_state(keys, context_id, task_id)
        if state is None:  # scrubbed (or expired): nothing more will come
            return []
        if settled(state):
            return await self._log.after(keys, context_id, task_id, cursor, BATCH)
        return None

    def _event(self, e: LoggedEvent, task_id: str, context_id: str) -> StreamEvent:
        return StreamEvent(e.id, e.kind, e.data, task_id, context_id)

    async def _follow(
        self,
        keys: UserKeys,
        context_id: str,
        task_id: str,
        cursor: str,
        first: StreamEvent | None,
    ) -> TaskStream:
        if first is not None:
            yield first
            if first.final:
                return
        async with self._events.signal(task_id) as news:
            self._readers.add(news)
            try:
                async for event in self._read(keys, context_id, task_id, cursor, news):
                    yield event
            finally:
                self._readers.discard(news)

    async def _read(
        self, keys: UserKeys, context_id: str, task_id: str, cursor: str, news: asyncio.Event
    ) -> TaskStream:
        while not self._closing:
            news.clear()  # before the read: what is published after it wakes us
            batch = await self._log.after(keys, context_id, task_id, cursor, BATCH)
            for logged in batch:
                event = self._event(logged, task_id, context_id)
                yield event
                cursor = logged.id
                if event.final:
                    return
            if len(batch) == BATCH:
                continue
            tail = None if batch else await self._ended(keys, context_id, task_id, cursor)
            if tail is not None:
                for logged in tail:
                    yield self._event(logged, task_id, context_id)
                return
            try:
                await asyncio.wait_for(news.wait(), self._keepalive)
            except TimeoutError:
                yield None
