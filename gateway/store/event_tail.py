"""One reader of task event logs per process, for every stream it serves.

A stream reader does not read Redis itself: it ``follow``s its task's log (``event_log.py``)
from its cursor, and this process's ``EventTail`` reads the logs followed, all at once, with
one blocking ``XREAD`` on a connection of its own (one per shard on a Redis Cluster, where
logs live on different nodes), and hands each new entry to every follower of that log: an
entry is decoded (unsealed) once, whoever follows it. So open streams hold no pooled
connection and issue no command per event: a thousand streams of one task cost one read
per batch of events. A log's read starts at the earliest cursor of its followers; a
follower gets only entries after its own.

A follower joining interrupts the read under way (``CLIENT UNBLOCK`` from a second
connection of the shard), so it is read from at once. A shard whose logs are no longer
followed stops reading and closes its connections; they are opened again when needed.
Redis unreachable: the reader retries with backoff (followers wait; their streams probe the
store on their own schedule and end on its error); an entry that does not decode fails its
log's followers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.backoff import Backoff, RetryPolicy
from gateway.store.assembly import text_of
from gateway.store.event_log import Decoder, LoggedEvent, position

__all__ = ["EventTail", "Following", "Sink"]

log = logging.getLogger("gateway.streams")

# Entries read per log at a time: up to COUNT, fewer when they are large (about READ_BYTES
# a read); how long a read blocks when nothing comes (a follower joining cuts it short).
COUNT = 100
READ_BYTES = 2 * 1024 * 1024
BLOCK_MS = 2000
_RETRY = RetryPolicy(Backoff(0.05, 2.0), (RedisError, OSError))


class Sink(Protocol):
    """Where a follower's events go."""

    def put(self, event: LoggedEvent) -> bool:
        """Take an event; False when it takes no more (it is then no longer followed)."""

    def fail(self, error: Exception) -> None:
        """The log cannot be read for it (an entry does not decode)."""


@dataclass(eq=False)
class Following:
    key: str
    position: tuple[int, int]  # of the last entry handed over
    sink: Sink
    decode: Decoder


@dataclass(eq=False)
class _Log:
    decode: Decoder
    shard: str
    followers: set[Following] = field(default_factory=set)


@dataclass(eq=False)
class _Shard:
    url: str
    keys: set[str] = field(default_factory=set)
    running: bool = False
    changed: bool = False  # followers joined since the read under way was sent
    blocked: bool = False  # a read is under way
    unblocking: bool = False
    count: int = COUNT  # entries per log, per read
    client_id: int | None = None
    control: Redis | None = None
    task: asyncio.Task[None] | None = None


class EventTail:
    def __init__(self, url: str, cluster: Any = None, *, timeout: float) -> None:
        """``url``: a plain Redis URL; ``cluster``: the cluster client, which tells on which
        node each log lives (None: standalone, every log on ``url``)."""
        self._url, self._cluster, self._timeout = url, cluster, timeout
        self._logs: dict[str, _Log] = {}
        self._shards: dict[str, _Shard] = {}
        self._unblocks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self.block_ms = BLOCK_MS

    # -- following ----------------------------------------------------------------------

    def follow(self, key: str, after: str, decode: Decoder, sink: Sink) -> Following:
        """Hand ``sink`` every entry of the log ``key`` after the id ``after``."""
        following = Following(key, position(after), sink, decode)
        entry = self._logs.get(key)
        if entry is None:
            entry = self._logs[key] = _Log(decode, self._shard_of(key))
        entry.followers.add(following)
        self._place(key, entry)
        return following

    def _place(self, key: str, entry: _Log) -> None:
        """Read ``key`` on its shard, from now on."""
        shard = self._shards.get(entry.shard)
        if shard is None:
            shard = self._shards[entry.shard] = _Shard(self._node_url(entry.shard))
        shard.keys.add(key)
        shard.changed = True
        if not shard.running and not self._stopping:
            shard.running = True
            shard.task = asyncio.create_task(self._run(shard), name="event-tail")
        elif shard.blocked and not shard.unblocking:
            shard.unblocking = True
            self._unblocks.add(task := asyncio.create_task(self._unblock(shard)))
            task.add_done_callback(self._unblocks.discard)

    def unfollow(self, following: Following) -> None:
        entry = self._logs.get(following.key)
        if entry is None or following not in entry.followers:
            return
        entry.followers.discard(following)
        if not entry.followers:
            del self._logs[following.key]
            shard = self._shards.get(entry.shard)
            if shard is not None:
                shard.keys.discard(following.key)

    @property
    def followed(self) -> int:
        """How many logs are followed now."""
        return len(self._logs)

    async def stop(self) -> None:
        self._stopping = True
        tasks = [s.task for s in self._shards.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)

    # -- where logs live --------------------------------------------------------------------

    def _shard_of(self, key: str) -> str:
        if self._cluster is None:
            return ""
        node = self._cluster.get_node_from_key(key)
        return f"{node.host}:{node.port}"

    def _node_url(self, shard: str) -> str:
        if not shard:
            return self._url
        parts = urlsplit(self._url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{shard}" if userinfo else shard
        return urlunsplit(parts._replace(netloc=netloc))

    # -- reading ------------------------------------------------------------------------------

    def _connect(self, url: str) -> Redis:
        # The socket timeout outlasts a blocking read.
        read_timeout = self._timeout + self.block_ms / 1000
        return Redis.from_url(
            url,
            single_connection_client=True,
            socket_timeout=read_timeout,
            socket_connect_timeout=self._timeout,
        )

    async def _run(self, shard: _Shard) -> None:
        pauses = _RETRY.pauses()
        reader: Redis | None = None
        try:
            while shard.keys and not self._stopping:
                try:
                    if reader is None:
                        reader, control = self._connect(shard.url), self._connect(shard.url)
                        shard.client_id = int(await reader.client_id())
                        shard.control = control
                    await self._read(shard, reader)
                    pauses.reset()
                except Exception as exc:  # a defect must not stop the reader either
                    level = logging.WARNING if _RETRY.retries(exc) else logging.ERROR
                    log.log(level, "event log read failed", extra={"error": type(exc).__name__})
                    await self._close(shard, reader)
                    reader = None
                    await pauses.wait()
                    self._relocate(shard)
        finally:
            shard.running = False
            await self._close(shard, reader)
            if shard.keys and not self._stopping and not shard.running:  # followed again
                shard.running = True
                shard.task = asyncio.create_task(self._run(shard), name="event-tail")
            elif not shard.keys:
                for name, known in list(self._shards.items()):
                    if known is shard:
                        del self._shards[name]

    async def _close(self, shard: _Shard, reader: Redis | None) -> None:
        control, shard.control, shard.client_id = shard.control, None, None
        for client in (reader, control):
            if client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.aclose(), self._timeout)

    async def _read(self, shard: _Shard, reader: Redis) -> None:
        streams: dict[Any, Any] = {}
        for key in shard.keys:
            entry = self._logs.get(key)
            if entry is not None and entry.followers:
                ms, n = min(f.position for f in entry.followers)
                streams[key] = f"{ms}-{n}"
        if not streams:  # none followed any more (never a loop without a wait)
            shard.keys.clear()
            return
        shard.changed, shard.blocked = False, True
        try:
            reply = await reader.xread(streams, count=shard.count, block=self.block_ms)
        finally:
            shard.blocked = False
        read, largest = _entries(reply), 0
        for key, entries in read:
            self._hand_out(text_of(key), entries)
            largest = max([largest, *(sum(map(len, f.values())) for _, f in entries)])
        if read:
            shard.count = max(1, min(COUNT, READ_BYTES // max(largest, 1)))

    def _hand_out(self, key: str, entries: list[tuple[Any, dict[bytes, bytes]]]) -> None:
        entry = self._logs.get(key)
        if entry is None:
            return
        for raw_id, fields in entries:
            entry_id = text_of(raw_id)
            at = position(entry_id)
            event: LoggedEvent | None = None
            for following in list(entry.followers):
                if following.position >= at:
                    continue
                if event is None:
                    try:
                        event = entry.decode(entry_id, fields)
                    except Exception as exc:
                        self._fail(entry, exc)
                        return
                following.position = at
                if not following.sink.put(event):
                    self.unfollow(following)

    def _fail(self, entry: _Log, error: Exception) -> None:
        for following in list(entry.followers):
            following.sink.fail(error)
            self.unfollow(following)

    async def _unblock(self, shard: _Shard) -> None:
        """Cut short the read under way, so that it is sent again with the new follower.
        Sent again while it finds nothing to unblock yet (the read on its way to Redis)."""
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.block_ms / 1000
            while shard.changed and shard.blocked and loop.time() < deadline:
                control, client_id = shard.control, shard.client_id
                if control is None or client_id is None:
                    return
                if await control.client_unblock(client_id):
                    return
                await asyncio.sleep(0.005)
        except (RedisError, OSError):
            pass  # the read ends by itself within its block time
        finally:
            shard.unblocking = False

    def _relocate(self, shard: _Shard) -> None:
        """On a cluster, after a failed read: logs that moved to another node are read there."""
        if self._cluster is None:
            return
        for key in list(shard.keys):
            entry = self._logs.get(key)
            if entry is None:
                shard.keys.discard(key)
                continue
            try:
                where = self._shard_of(key)
            except Exception:  # the cluster's map is being refreshed: try again later
                continue
            if where != entry.shard:
                shard.keys.discard(key)
                entry.shard = where
                self._place(key, entry)


def _entries(reply: Any) -> list[tuple[Any, list[tuple[Any, dict[bytes, bytes]]]]]:
    """XREAD's reply as (key, entries)."""
    return [(key, entries) for key, entries in reply or ()]
