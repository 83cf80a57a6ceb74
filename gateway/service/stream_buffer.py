"""A stream reader's buffer: the events this process's log reader (``store/event_tail.py``)
handed to it that its client has not taken yet, bounded in bytes.

A buffer takes one event whatever its size; past that, an event that would take it over
its limit is refused, and the buffer takes nothing more (``behind``): its stream leaves
the shared reader, writes what its buffer holds, then reads the log itself at its
client's pace, a few events at a time, and follows the shared reader again once it has
caught up. What a slow client has not taken stays in Redis: it costs its process at most
the limit (plus the event being written), never the run or the other readers anything.
"""

from __future__ import annotations

import asyncio
import collections

from gateway.store.event_log import LoggedEvent

__all__ = ["StreamBuffer"]


class StreamBuffer:
    def __init__(self, limit_bytes: int, ready: asyncio.Event | None = None) -> None:
        """``ready``: the event that wakes the stream (set on news of its task as well)."""
        self.limit = limit_bytes
        self._events: collections.deque[LoggedEvent] = collections.deque()
        self._bytes = 0
        self.behind = False
        self.refused = 0  # the size of the event it refused (falling behind)
        self.error: Exception | None = None
        self._ready = ready or asyncio.Event()

    # -- the log reader's side ----------------------------------------------------------

    def put(self, event: LoggedEvent) -> bool:
        if self.behind or self.error is not None:
            return False
        if self._events and self._bytes + event.size > self.limit:
            self.behind, self.refused = True, event.size
            self._ready.set()
            return False
        self._events.append(event)
        self._bytes += event.size
        self._ready.set()
        return True

    def fail(self, error: Exception) -> None:
        self.error = error
        self._events.clear()
        self._bytes = 0
        self._ready.set()

    # -- the stream's side ------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Bytes of events waiting."""
        return self._bytes

    def take(self) -> LoggedEvent | None:
        """The oldest event waiting, if any."""
        if not self._events:
            return None
        event = self._events.popleft()
        self._bytes -= event.size
        return event

    def caught_up(self) -> None:
        """The stream has read what it missed: it takes events again."""
        self.behind = False

    def wake(self) -> None:
        """End a ``wait`` now (news of the task, or the server stopping)."""
        self._ready.set()

    async def wait(self, timeout: float) -> bool:  # noqa: ASYNC109 (a keep-alive's interval)
        """Wait up to ``timeout`` seconds for an event, or a ``wake`` (or news) since the
        last wait; False if none came."""
        if not self._ready.is_set():
            try:
                await asyncio.wait_for(self._ready.wait(), timeout)
            except TimeoutError:
                return False
        self._ready.clear()
        return True
