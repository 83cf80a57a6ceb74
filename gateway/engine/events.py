"""Task state notifications over Redis pub/sub, fanned out to local watchers.

A task's changes are published by the store's scripts on ``gw:ev:<task id>``; what must
stop its run wherever it is (a cancel, an interruption) on ``gw:stop:<task id>``. Every
process subscribes to the stops (one pattern). A task's changes reach a process only while
it follows that task (``follow``: a stream reader, a wait for a run in another process), so
a process does not hear the news of every task every other process runs, nor its own: a
run here hands its outcome to local watchers directly (``notify_local``). Watchers are
blocking requests waiting for an outcome, runners that must stop a canceled run, and stream
readers (``signal``: woken by any event of the task, ``artifact|<seq>`` included). The
listener reconnects by itself, and subscribes again to what is followed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.exceptions import RedisError

from gateway.backoff import Backoff, RetryPolicy
from gateway.store.keys import (
    EVENT_CHANNEL,
    SIGNAL_INTERRUPTED,
    SIGNAL_NEXT,
    STOP_CHANNEL,
    STOPS_PATTERN,
)

__all__ = ["INTERRUPTED", "NEXT", "Mailbox", "TaskEvent", "TaskEvents"]

log = logging.getLogger("gateway.events")
_NEWS, _STOPS = EVENT_CHANNEL.encode(), STOP_CHANNEL.encode()
# How long ``follow`` waits for its subscription to be in place before going on regardless
# (waiters fall back to polling the store, so a late subscription delays, never loses).
SUBSCRIBE_SECONDS = 2.0

# Events that are not task states (defined beside the channel: the scripts publish them).
NEXT = SIGNAL_NEXT
INTERRUPTED = SIGNAL_INTERRUPTED
# Events that come from outside the task's run, so they reach local watchers through Redis
# even while the run is in this process.
_FOREIGN = frozenset({"canceled", INTERRUPTED})
# A lost subscription is made again, with these pauses.
_RESUBSCRIBE = RetryPolicy(Backoff(0.05, 2.0), (RedisError, OSError))


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """A task's new state; a local event from this process's runner also carries the
    stored status and artifacts, so a waiter here needs no read."""

    state: str
    seq: int = 0  # the run's message; 0 when it concerns the task whatever ran (a cancel)
    status_json: bytes | None = None
    artifacts_json: bytes | None = None
    metadata_json: bytes | None = None  # what the agent reported for the task's metadata


class Mailbox:
    """A watcher's events of one task, in the order they came: ``put_nowait`` never waits,
    ``next`` waits for the next one for at most a time. (An ``asyncio.Queue`` read through
    ``asyncio.wait_for`` would cost a blocking send a queue with its own event, a task for
    the read and three loop callbacks more.)"""

    __slots__ = ("_events", "_waiter")

    def __init__(self) -> None:
        self._events: collections.deque[TaskEvent] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, event: TaskEvent) -> None:
        self._events.append(event)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self, seconds: float) -> TaskEvent | None:
        """The next event, or None when none came within ``seconds``."""
        if not self._events:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(seconds, _wake, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
        return self._events.popleft() if self._events else None


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class TaskEvents:
    def __init__(self, client: Redis) -> None:
        """``client`` is a plain connection (pub/sub reaches every node of a cluster)."""
        self._client = client
        self._watchers: defaultdict[str, set[Mailbox]] = defaultdict(set)
        self._listeners: list[Callable[[str, str, int], None]] = []
        self._signals: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._local_runs: set[str] = set()
        self._listener: asyncio.Task[None] | None = None
        self._pubsub: PubSub | None = None
        # The tasks' channels followed here (by how many), the subscriptions sent for each
        # and not yet confirmed, and what a follower waits on until they are.
        self._followed: dict[bytes, int] = {}
        self._unconfirmed: dict[bytes, int] = {}
        self._subscribed: dict[bytes, asyncio.Event] = {}
        self._stopping = False
        self._ready = asyncio.Event()

    async def start(self, ready_within: float) -> None:
        """Subscribe; wait up to ``ready_within`` seconds for it (it keeps retrying after)."""
        self._listener = asyncio.create_task(self._listen(), name="task-events")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), ready_within)

    async def stop(self) -> None:
        """Stop listening. Bounded: a cancellation lost inside the client library (Python
        3.11's wait_for can drop one) must not hang shutdown, so the connection is closed
        under the listener as well."""
        self._stopping = True
        if self._listener is None:
            return
        self._listener.cancel()
        if self._pubsub is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._pubsub.aclose(), 1.0)  # type: ignore[no-untyped-call]
        done, _ = await asyncio.wait({self._listener}, timeout=2.0)
        if not done:
            log.warning("event listener did not stop in time")

    def add_listener(self, callback: Callable[[str, str, int], None]) -> None:
        """Call ``callback(task_id, state, seq)`` for every event this process receives."""
        self._listeners.append(callback)

    def watch(self, task_id: str) -> contextlib.AbstractContextManager[Mailbox]:
        """A mailbox of the task's events for as long as the block runs."""
        return _Watch(self._watchers, task_id)

    @contextlib.asynccontextmanager
    async def signal(self, task_id: str) -> AsyncIterator[asyncio.Event]:
        """An event set whenever anything of the task is published (a state, an artifact),
        wherever its run is: stream readers clear it, then read the task's event log. The
        task is followed from when this is entered."""
        flag = asyncio.Event()
        self._signals[task_id].add(flag)
        try:
            async with self.follow(task_id):
                yield flag
        finally:
            signals = self._signals.get(task_id)
            if signals is not None:
                signals.discard(flag)
                if not signals:
                    del self._signals[task_id]

    @contextlib.asynccontextmanager
    async def follow(self, task_id: str) -> AsyncIterator[None]:
        """Receive the task's changes from Redis while the block runs, wherever its run is.
        Entered once the subscription is in place (or ``SUBSCRIBE_SECONDS`` have passed):
        read the task's state after entering, and nothing published later is missed."""
        channel = _NEWS + task_id.encode()
        followers = self._followed.get(channel, 0)
        self._followed[channel] = followers + 1
        try:
            if not followers:
                self._subscribed[channel] = asyncio.Event()
                await self._subscribe(channel)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._subscribed[channel].wait(), SUBSCRIBE_SECONDS)
            yield
        finally:
            left = self._followed.pop(channel) - 1
            if left:
                self._followed[channel] = left
            else:
                del self._subscribed[channel]
                await self._unsubscribe(channel)

    async def _subscribe(self, channel: bytes) -> None:
        """Subscribe to a task's channel (when not connected, the listener does on connecting)."""
        pubsub = self._pubsub
        if pubsub is None or not self._ready.is_set():
            return
        self._unconfirmed[channel] = self._unconfirmed.get(channel, 0) + 1
        try:
            await pubsub.subscribe(channel)
        except Exception as exc:  # the listener notices the lost connection and resubscribes
            log.warning("task subscription not sent", extra={"error": type(exc).__name__})

    async def _unsubscribe(self, channel: bytes) -> None:
        pubsub = self._pubsub
        if pubsub is None or not self._ready.is_set():
            return
        try:
            await pubsub.unsubscribe(channel)
        except Exception as exc:
            log.warning("task subscription not ended", extra={"error": type(exc).__name__})

    def _confirmed(self, channel: bytes) -> None:
        """Redis confirmed a subscription to ``channel``: its followers may go on once every
        subscription sent for it is in place."""
        left = self._unconfirmed.get(channel, 0) - 1
        if left > 0:
            self._unconfirmed[channel] = left
            return
        self._unconfirmed.pop(channel, None)
        subscribed = self._subscribed.get(channel)
        if subscribed is not None:
            subscribed.set()

    def running_here(self, task_id: str) -> contextlib.AbstractContextManager[None]:
        """While a run of the task is in this process, its own events reach local watchers
        directly (with the stored task), not through Redis; only a cancel comes from there."""
        return _RunningHere(self._local_runs, task_id)

    def notify_local(self, task_id: str, event: TaskEvent) -> None:
        """Deliver an event to this process's watchers now (it also arrives by Redis)."""
        for mailbox in self._watchers.get(task_id, ()):
            mailbox.put_nowait(event)

    def _dispatch(self, channel: bytes, payload: bytes) -> None:
        prefix = _STOPS if channel.startswith(_STOPS) else _NEWS
        task_id = channel[len(prefix) :].decode()
        text, _, raw_seq = payload.decode().partition("|")
        seq = int(raw_seq or 0)
        for flag in self._signals.get(task_id, ()):
            flag.set()
        watchers = self._watchers.get(task_id)
        if watchers and (text in _FOREIGN or task_id not in self._local_runs):
            event = TaskEvent(text, seq)
            for mailbox in watchers:
                mailbox.put_nowait(event)
        for callback in self._listeners:
            callback(task_id, text, seq)

    async def _listen(self) -> None:
        pauses = _RESUBSCRIBE.pauses()
        while not self._stopping:
            pubsub = self._pubsub = self._client.pubsub()
            try:
                await pubsub.psubscribe(STOPS_PATTERN)
                # What was followed while disconnected; later follows subscribe themselves.
                followed = list(self._followed)
                self._unconfirmed = dict.fromkeys(followed, 1)
                self._ready.set()
                if followed:
                    await pubsub.subscribe(*followed)
                pauses.reset()
                async for msg in pubsub.listen():
                    kind = msg["type"]
                    if kind in ("message", "pmessage"):
                        self._dispatch(msg["channel"], msg["data"])
                    elif kind == "subscribe":
                        self._confirmed(msg["channel"])
            except Exception as exc:
                if not _RESUBSCRIBE.retries(exc):
                    raise
                self._ready.clear()
                if self._stopping:
                    return
                log.warning(
                    "event subscription lost; reconnecting", extra={"error": type(exc).__name__}
                )
                await pauses.wait()
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]


# Context managers as classes, not generators: one of each is entered on every send.


class _Watch:
    """``TaskEvents.watch``: a mailbox among the task's watchers while the block runs."""

    __slots__ = ("_mailbox", "_task_id", "_watchers")

    def __init__(self, watchers: defaultdict[str, set[Mailbox]], task_id: str):
        self._watchers, self._task_id = watchers, task_id
        self._mailbox = Mailbox()

    def __enter__(self) -> Mailbox:
        self._watchers[self._task_id].add(self._mailbox)
        return self._mailbox

    def __exit__(self, *exc: object) -> None:
        watchers = self._watchers.get(self._task_id)
        if watchers is not None:
            watchers.discard(self._mailbox)
            if not watchers:
                del self._watchers[self._task_id]


class _RunningHere:
    """``TaskEvents.running_here``: the task among this process's runs while the block runs."""

    __slots__ = ("_runs", "_task_id")

    def __init__(self, runs: set[str], task_id: str) -> None:
        self._runs, self._task_id = runs, task_id

    def __enter__(self) -> None:
        self._runs.add(self._task_id)

    def __exit__(self, *exc: object) -> None:
        self._runs.discard(self._task_id)
