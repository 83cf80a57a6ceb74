"""The jobs stream: reading, heartbeats, reclaiming, dead letters and queue figures.

Entries hold ids only (never message content); each is written by the send script
together with its message, and acknowledged-and-deleted by the write that stores
the run's outcome. Entries are fenced per attempt, so a reclaimed job can never
write twice.

Every stream's ``job`` field (``fields.ENTRY_JOB``) is JSON naming its context with ``t``
(tenant), ``u`` (user) and ``c`` (context id); dead letters are found by it when a context is
scrubbed. Dead letters are kept up to a count and an age. A consumer leaves its group
when its process stops (handing any pending entry to ``RECLAIMER`` first, with a fresh
lease, so maintenance requeues it after the lease as before); consumers of processes
that died are pruned once they hold nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gateway.store.assembly import text_of as _text
from gateway.store.fields import ENTRY_FORGET, ENTRY_JOB
from gateway.store.keys import DEAD_LETTERS, JOBS, JOBS_GROUP, MAINTENANCE_LEADER, UserKeys
from gateway.store.lua import Scripts
from gateway.store.lua.streams import (
    DropIdleArgs,
    ForgetDeadArgs,
    LeadArgs,
    LeaveArgs,
    ResignArgs,
    forget_dead_reply,
)
from gateway.store.multiplex import Multiplexed
from gateway.store.translate import translated

__all__ = ["RECLAIMER", "Entry", "JobStore", "PendingJob", "QueueFigures"]

Entry = tuple[str, dict[bytes, bytes]]

# The consumer maintenance claims stalled jobs as (in every process), and the one a stopping
# process hands its unfinished jobs to.
RECLAIMER = "maintenance"
DEAD_MAX_ENTRIES = 10_000
DEAD_MAX_AGE_SECONDS = 7 * 24 * 3600
_FORGET_CHUNK = 500


@dataclass(frozen=True)
class PendingJob:
    entry: str
    consumer: str
    idle_ms: int
    deliveries: int


@dataclass(frozen=True)
class QueueFigures:
    queued: int  # not yet delivered to a worker
    pending: int  # delivered, not yet acknowledged
    lag_seconds: float  # age of the oldest job not yet delivered
    dead: int
    oldest_seconds: float = 0.0  # age of the oldest job not yet done (queued or pending)


def _decode(entries: Any) -> list[Entry]:
    out: list[Entry] = []
    for entry_id, fields in entries or ():
        if fields:  # a claimed entry that was deleted meanwhile comes back empty
            out.append((entry_id.decode() if isinstance(entry_id, bytes) else entry_id, fields))
    return out


def _pairs(fields: list[bytes] | None) -> dict[bytes, bytes] | None:
    """An entry's fields as the raw reply lists them (name, value, ...), as a dict."""
    return dict(zip(fields[::2], fields[1::2], strict=True)) if fields else None


class JobStore:
    def __init__(
        self,
        client: Any,
        stream: str = JOBS,
        group: str = JOBS_GROUP,
        dead: str = DEAD_LETTERS,
        *,
        dead_max_entries: int = DEAD_MAX_ENTRIES,
        dead_max_age_seconds: float = DEAD_MAX_AGE_SECONDS,
        hot: Multiplexed | None = None,
    ) -> None:
        self.client: Redis = client
        # Acknowledgements go beside the sends of the moment when given (multiplex.py).
        self.hot = hot
        self.stream, self.group, self.dead = stream, group, dead
        self.dead_max_entries, self.dead_max_age = dead_max_entries, dead_max_age_seconds
        self._scripts = Scripts.register(client)

    @translated
    async def ensure_group(self) -> None:
        try:
            await self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    @translated
    async def read(self, consumer: str, count: int, block_ms: int | None) -> list[Entry]:
        """Up to ``count`` new jobs; waits up to ``block_ms`` for the first (None: no wait).
        A read that does not wait goes on the multiplexed connection when there is one (a
        fraction of a client command's cost; a read that waits would hold it up)."""
        try:
            if block_ms is None and self.hot is not None:
                raw = await self.hot.execute(
                    "XREADGROUP", "GROUP", self.group, consumer, "COUNT", count,
                    "STREAMS", self.stream, ">",
                )  # fmt: skip
                entries = raw[0][1] if raw else ()
                return _decode([(entry, _pairs(fields)) for entry, fields in entries])
            reply: Any = await self.client.xreadgroup(
                self.group, consumer, {self.stream: ">"}, count=count, block=block_ms
            )
        except ResponseError as exc:  # the stream was deleted (FLUSHALL, a fresh Redis)
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_group()
            return []
        return _decode(reply[0][1]) if reply else []

    @translated
    async def heartbeat(self, consumer: str, entries: list[str]) -> None:
        """Reset the idle time of jobs this consumer is still running (keeps its lease)."""
        if entries:
            ids: list[Any] = list(entries)
            await self.client.xclaim(self.stream, self.group, consumer, 0, ids, justid=True)

    @translated
    async def stale(self, lease_ms: int, count: int) -> list[PendingJob]:
        try:
            rows = await self.client.xpending_range(
                self.stream, self.group, min="-", max="+", count=count, idle=lease_ms
            )
        except ResponseError as exc:  # no stream or group yet: nothing was ever delivered
            if "NOGROUP" not in str(exc):
                raise
            return []
        return [
            PendingJob(
                entry=_text(r["message_id"]),
                consumer=_text(r["consumer"]),
                idle_ms=int(r["time_since_delivered"]),
                deliveries=int(r["times_delivered"]),
            )
            for r in rows
        ]

    @translated
    async def claim(self, consumer: str, lease_ms: int, entry: str) -> Entry | None:
        """Take a stale job over; None if someone else did, or it is gone."""
        claimed = _decode(
            await self.client.xclaim(self.stream, self.group, consumer, lease_ms, [entry])
        )
        return claimed[0] if claimed else None

    @translated
    async def ack(self, entries: list[str]) -> None:
        """Acknowledge the entries and delete them from the stream. On the multiplexed
        connection both commands go in one write (Redis runs a connection's commands in
        order, and a reclaimer finds an acknowledged entry no longer pending)."""
        if entries and self.hot is not None:
            await self.hot.execute_many(
                [("XACK", self.stream, self.group, *entries), ("XDEL", self.stream, *entries)]
            )
        elif entries:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.xack(self.stream, self.group, *entries)
                pipe.xdel(self.stream, *entries)
                await pipe.execute()

    @translated
    async def requeue(self, entry: str, fields: dict[bytes, bytes], attempts: int) -> None:
        """Put a stalled job back at the end of the queue as a fresh entry."""
        async with self.client.pipeline(transaction=True) as pipe:
            record: dict[Any, Any] = {**fields, b"n": attempts}
            pipe.xadd(self.stream, record)
            pipe.xack(self.stream, self.group, entry)
            pipe.xdel(self.stream, entry)
            await pipe.execute()

    @translated
    async def dead_letter(self, entry: str, fields: dict[bytes, bytes], reason: str) -> None:
        """Move the job to the dead letters (capped at about ``dead_max_entries``). A job
        of a context scrubbed meanwhile is dropped instead: checked after the write, so a
        scrub either sees the entry or has already deleted the context."""
        async with self.client.pipeline(transaction=True) as pipe:
            record: dict[Any, Any] = {**fields, b"reason": reason.encode(), b"from": entry}
            pipe.xadd(self.dead, record, maxlen=self.dead_max_entries, approximate=True)
            pipe.xack(self.stream, self.group, entry)
            pipe.xdel(self.stream, entry)
            dead, *_ = await pipe.execute()
        owner = _context_of(fields)
        if owner is not None and ENTRY_FORGET.encode() not in fields:
            tenant, user, context_id = owner
            if not await self.client.exists(UserKeys.of(tenant, user).meta(context_id)):
                await self.client.xdel(self.dead, dead)

    @translated
    async def forget_context(self, tenant: str, user: str, context_id: str) -> int:
        """Delete the dead letters of one context; returns how many went. Reads the dead
        letters in chunks (they are capped, so this is bounded)."""
        deleted, start = 0, "-"
        while context_id:
            args = ForgetDeadArgs(tenant, user, context_id, start, _FORGET_CHUNK)
            reply = forget_dead_reply(
                await self._scripts.forget_dead(keys=[self.dead], args=args.argv())
            )
            deleted += reply.deleted
            if reply.read < _FORGET_CHUNK:
                return deleted
            start = f"({reply.last}"
        return deleted

    @translated
    async def trim_dead(self) -> int:
        """Drop dead letters past their retention (age, then count); returns how many."""
        oldest = int((time.time() - self.dead_max_age) * 1000)
        trimmed = await self.client.xtrim(self.dead, minid=f"{max(0, oldest)}-0", approximate=False)
        trimmed += await self.client.xtrim(
            self.dead, maxlen=self.dead_max_entries, approximate=False
        )
        return int(trimmed)

    @translated
    async def leave(self, consumer: str) -> int:
        """Remove ``consumer`` from the group, handing its pending jobs to the reclaimer with
        a fresh lease (none is lost: maintenance requeues them once it runs out); returns
        how many."""
        args = LeaveArgs(self.group, consumer, RECLAIMER)
        return int(await self._scripts.leave(keys=[self.stream], args=args.argv()))

    @translated
    async def prune_consumers(self, idle_ms: int) -> int:
        """Remove consumers idle for ``idle_ms`` that hold no pending job (those of processes
        that died; a live one idles for one blocking read at most, and would be re-created
        by its next read); returns how many."""
        try:
            rows = await self.client.xinfo_consumers(self.stream, self.group)
        except ResponseError:  # no stream or group yet
            return 0
        pruned = 0
        for row in rows:
            if int(row["pending"]) == 0 and int(row["idle"]) >= idle_ms:
                name = _text(row["name"])
                args = DropIdleArgs(self.group, name)
                pruned += int(await self._scripts.drop_idle(keys=[self.stream], args=args.argv()))
        return pruned

    @translated
    async def lead(self, node: str, ttl_ms: int) -> bool:
        """Whether ``node`` holds (or has just taken) the maintenance lead."""
        args = LeadArgs(node, ttl_ms)
        return bool(await self._scripts.lead(keys=[MAINTENANCE_LEADER], args=args.argv()))

    @translated
    async def resign(self, node: str) -> None:
        """Give the maintenance lead up if ``node`` holds it."""
        await self._scripts.resign(keys=[MAINTENANCE_LEADER], args=ResignArgs(node).argv())

    @translated
    async def figures(self) -> QueueFigures:
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.xlen(self.stream)
            pipe.xlen(self.dead)
            length, dead = await pipe.execute()
        try:
            pending = await self.client.xpending(self.stream, self.group)
            groups = await self.client.xinfo_groups(self.stream)
        except ResponseError:  # no stream or no group yet: nothing was ever delivered
            pending, groups = None, []
        pending_count = int(pending["pending"]) if pending else 0
        last = next(
            (_text(g["last-delivered-id"]) for g in groups if _text(g["name"]) == self.group),
            "0-0",
        )
        undelivered = await self.client.xrange(self.stream, min=f"({last}", max="+", count=1)
        first = await self.client.xrange(self.stream, min="-", max="+", count=1)
        return QueueFigures(
            max(0, int(length) - pending_count),
            pending_count,
            _age(undelivered),
            int(dead),
            _age(first),
        )


def _context_of(fields: dict[bytes, bytes]) -> tuple[str, str, str] | None:
    """The (tenant, user, context id) a job names, if it can be read."""
    try:
        job = orjson.loads(fields[ENTRY_JOB.encode()])
        return str(job["t"]), str(job["u"]), str(job["c"])
    except (KeyError, TypeError, ValueError):
        return None


def _age(entries: Any) -> float:
    """Seconds since the first of ``entries`` was added (0 when there is none)."""
    if not entries:
        return 0.0
    stamp = int(_text(entries[0][0]).split("-")[0])
    return max(0.0, time.time() - stamp / 1000)
