"""Live task events: a streaming send and (re)subscription to a task, from any replica.

A reader starts from a snapshot of the task (the first event, carrying the id of the last
logged event it includes) or from a ``Last-Event-ID`` the task's log still holds, then
follows the log (``store/event_log.py``) after its cursor through this process's one log
reader (``store/event_tail.py``), which hands it each new event into its buffer
(``stream_buffer.py``): an open stream holds no Redis connection and sends no command per
event. A client slower than its events fills its buffer (bounded in bytes); its stream then
ends without a final event and the client resubscribes with its ``Last-Event-ID``: it never
slows the run or other readers. News of the task on its pub/sub signal
(``TaskEvents.signal``), or a keep-alive interval without events, makes the stream look at
the task's state (one read per task, shared by its readers): it ends after a terminal or
interrupted state, or when the task is gone (scrubbed). A client that goes away stops its
reader only: the run goes on.

Streams are admitted under limits per principal and per process (``stream_limits.py``),
and open their snapshot a few at a time, so that many streams opening at once do not take
as many pooled connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Literal

from gateway.a2a import settled
from gateway.agents.base import Agent
from gateway.engine.events import TaskEvents
from gateway.errors import TaskNotFoundError, UnsupportedOperationError
from gateway.models import ArtifactUpdate, SendMessageRequest, StatusUpdate, Task
from gateway.principal import Principal
from gateway.service.messages import MessageService
from gateway.service.stream_buffer import StreamBuffer
from gateway.service.stream_limits import Slot, StreamLimits
from gateway.store.event_log import EventLog, LoggedEvent, event_id
from gateway.store.event_tail import EventTail, Following
from gateway.store.redis_store import Store

__all__ = ["StreamEvent", "StreamService", "TaskStream"]

log = logging.getLogger("gateway.streams")

BATCH = 100  # events read from the log at a time, by a stream that reads it itself
OPENING = 16  # streams that read the store at once (opening, or a last look at the log)


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


class _Opened:
    """A stream handed to the HTTP layer: its events, and its admission slot, given back
    when it ends, is closed, or is dropped unread."""

    def __init__(self, events: AsyncGenerator[StreamEvent | None, None], slot: Slot) -> None:
        self._events, self._slot = events, slot

    def __aiter__(self) -> _Opened:
        return self

    async def __anext__(self) -> StreamEvent | None:
        try:
            return await anext(self._events)
        except BaseException:
            self._slot.release()
            raise

    async def aclose(self) -> None:
        try:
            await self._events.aclose()
        finally:
            self._slot.release()

    def __del__(self) -> None:
        self._slot.release()


class StreamService:
    def __init__(
        self,
        store: Store,
        events: TaskEvents,
        messages: MessageService,
        keepalive_seconds: float,
        *,
        tail: EventTail,
        limits: StreamLimits,
        buffer_bytes: int,
    ) -> None:
        self._store, self._events, self._messages = store, events, messages
        self._log = EventLog(store)
        self._keepalive = keepalive_seconds
        self._tail, self.limits, self._buffer_bytes = tail, limits, buffer_bytes
        self._buffers: set[StreamBuffer] = set()
        self._probes: dict[str, asyncio.Future[str | None]] = {}
        self._opening = asyncio.Semaphore(OPENING)
        self._closing = False

    def close(self) -> None:
        """End every stream of this process (the server is stopping): each ends after the
        event it is writing, and its client resubscribes, with its Last-Event-ID, elsewhere."""
        self._closing = True
        for buffer in self._buffers:
            buffer.wake()

    async def send(
        self, principal: Principal, agent: Agent, request: SendMessageRequest
    ) -> tuple[Task, TaskStream]:
        """Store the message as a send does (refusals raise here, before any event; a
        stream over its limits before the message is stored), then follow its task: first
        the task, then its events until the turn ends. Returns the task as the send stored
        it, and the stream."""
        slot = self.limits.admit(principal)
        try:
            config = request.configuration.model_copy(update={"blocking": False})
            request = request.model_copy(update={"configuration": config})
            task = await self._messages.send(principal, agent, request)
            return task, await self._subscribe(principal, task.id, None, True, slot)
        except BaseException:
            slot.release()
            raise

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
        slot = self.limits.admit(principal)
        try:
            return await self._subscribe(principal, task_id, last_event_id, terminal, slot)
        except BaseException:
            slot.release()
            raise

    async def _subscribe(
        self,
        principal: Principal,
        task_id: str,
        last_event_id: str | None,
        terminal: bool,
        slot: Slot,
    ) -> TaskStream:
        async with self._opening:
            context_id = await self._store.task_context(principal, task_id)
            if context_id is None:
                raise TaskNotFoundError()
            after = event_id(last_event_id)
            first: StreamEvent | None = None
            if after is None or not await self._log.kept_since(
                principal, context_id, task_id, after
            ):
                task, after = await self._log.snapshot(principal, context_id, task_id)
                if task is None:
                    raise TaskNotFoundError()
                first = StreamEvent(after, "task", task, task_id, context_id)
                if first.final and not terminal:
                    raise UnsupportedOperationError(
                        f"The task is {task.state}: there is nothing to subscribe to"
                    )
        return _Opened(self._follow(principal, context_id, task_id, after, first), slot)

    async def _state(self, principal: Principal, context_id: str, task_id: str) -> str | None:
        """The task's state (None: gone), read once for all its readers waiting on it."""
        key = self._log.key(principal, context_id, task_id)
        probe = self._probes.get(key)
        if probe is None:
            probe = asyncio.ensure_future(self._read_state(principal, context_id, task_id))
            self._probes[key] = probe
            probe.add_done_callback(lambda done: self._probed(key, done))
        return await asyncio.shield(probe)

    async def _read_state(self, principal: Principal, context_id: str, task_id: str) -> str | None:
        async with self._opening:
            return await self._store.task_state(principal, context_id, task_id)

    def _probed(self, key: str, probe: asyncio.Future[str | None]) -> None:
        if self._probes.get(key) is probe:
            del self._probes[key]
        if not probe.cancelled():
            probe.exception()  # retrieved: its readers, if any are left, raise it

    async def _tail_of(
        self, principal: Principal, context_id: str, task_id: str, cursor: str, count: int = BATCH
    ) -> list[LoggedEvent]:
        """What the log holds after ``cursor``, up to ``count`` events."""
        async with self._opening:
            return await self._log.after(principal, context_id, task_id, cursor, count)

    async def _quiet(
        self, principal: Principal, context_id: str, task_id: str, cursor: str, woke: bool
    ) -> tuple[bool, list[StreamEvent | None]]:
        """Nothing came (news of the task, or a keep-alive interval): whether the stream
        ends, and what it writes first (the log's last events, or a keep-alive)."""
        state = await self._state(principal, context_id, task_id)
        if state is None:  # scrubbed (or expired): nothing more will come
            return True, []
        if woke:  # news: its event is on its way through the log reader
            return False, []
        if settled(state):
            tail = await self._tail_of(principal, context_id, task_id, cursor)
            return True, [self._event(logged, task_id, context_id) for logged in tail]
        return False, [None]

    def _event(self, e: LoggedEvent, task_id: str, context_id: str) -> StreamEvent:
        return StreamEvent(e.id, e.kind, e.data, task_id, context_id)

    async def _follow(
        self,
        principal: Principal,
        context_id: str,
        task_id: str,
        cursor: str,
        first: StreamEvent | None,
    ) -> AsyncGenerator[StreamEvent | None, None]:
        if first is not None:
            yield first
            if first.final:
                return
        async with self._events.signal(task_id) as news:
            buffer = StreamBuffer(self._buffer_bytes, news)
            key = self._log.key(principal, context_id, task_id)
            decode = self._log.decoder(principal, context_id, task_id)
            following = [self._tail.follow(key, cursor, decode, buffer)]
            self._buffers.add(buffer)
            try:
                while not self._closing:
                    woke = await buffer.wait(self._keepalive)
                    taken = False
                    pending = self._taken(buffer, following, principal, context_id, task_id, cursor)
                    async for event in pending:
                        taken = True
                        yield event
                        cursor = event.id
                        if event.final:
                            return
                    if taken or self._closing:
                        continue
                    ending, tail = await self._quiet(principal, context_id, task_id, cursor, woke)
                    for item in tail:
                        yield item
                    if ending:
                        return
            finally:
                self._tail.unfollow(following[0])
                self._buffers.discard(buffer)

    async def _taken(
        self,
        buffer: StreamBuffer,
        following: list[Following],
        principal: Principal,
        context_id: str,
        task_id: str,
        cursor: str,
    ) -> AsyncIterator[StreamEvent]:
        """The events waiting in the buffer; when its client fell behind, then the log read
        from there to its end, before following the shared reader again."""
        while (logged := buffer.take()) is not None:
            yield self._event(logged, task_id, context_id)
            cursor = logged.id
        if buffer.error is not None:
            raise buffer.error
        if not buffer.behind:
            return
        key, decode = following[0].key, following[0].decode
        self._tail.unfollow(following[0])
        size = buffer.refused
        async for event in self._catch_up(principal, context_id, task_id, cursor, size):
            yield event
            cursor = event.id
        buffer.caught_up()
        following[0] = self._tail.follow(key, cursor, decode, buffer)

    async def _catch_up(
        self, principal: Principal, context_id: str, task_id: str, cursor: str, size: int
    ) -> AsyncIterator[StreamEvent]:
        """The log after ``cursor`` up to its end, read a few events at a time (as many as
        the buffer's limit holds of events the size of the last ones, ``size`` first), as
        the client takes them."""
        count = max(1, min(BATCH, self._buffer_bytes // max(size, 1)))
        while not self._closing:
            batch = await self._tail_of(principal, context_id, task_id, cursor, count)
            for logged in batch:
                yield self._event(logged, task_id, context_id)
                cursor = logged.id
            if len(batch) < count:
                return
            largest = max(logged.size for logged in batch)
            count = max(1, min(BATCH, self._buffer_bytes // max(largest, 1)))
