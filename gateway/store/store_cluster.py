"""The store's second steps on Redis Cluster (``ClusterSteps``), where the job streams live
in another slot than a context: a script changes the context, then the store queues or
acknowledges its jobs and moves its webhook deliveries to the push stream. A crash between
the two steps is repaired: a replayed send queues a lost job, the next run's start queues a
lost successor, maintenance sweeps deliveries left behind (``sweep_pushes``).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from redis.exceptions import RedisError

from gateway.clock import now_ms
from gateway.store import fields as f
from gateway.store.assembly import text_of as _text
from gateway.store.fields import task_field
from gateway.store.keys import JOBS, JOBS_GROUP, PENDING_PUSHES, PUSH, PUSH_CONTEXTS, UserKeys
from gateway.store.lua.push import TakePushesArgs, take_pushes_reply
from gateway.store.lua.run import RecordJobArgs
from gateway.store.store_base import StoreBase
from gateway.store.translate import translated as _translated

__all__ = ["ClusterSteps"]

log = logging.getLogger("gateway.store")


class ClusterSteps(StoreBase):
    """The second steps of the store's writes on a cluster (no-ops on standalone Redis but
    for ``move_pushes``, which a cluster's maintenance calls)."""

    async def _queue_job(
        self, keys: UserKeys, context_id: str, task_id: str, job_json: bytes, seq: int
    ) -> str:
        """Cluster mode's second step of a send: queue the run (ids only), then record its
        entry on the task in place of the 'pending' mark the send script left."""
        entry = _text(await self.client.xadd(JOBS, {f.ENTRY_JOB: job_json, f.ENTRY_SEQ: seq}))
        tasks = keys.context(context_id).tasks
        await self.scripts.record_job(keys=[tasks], args=RecordJobArgs(task_id, seq, entry).argv())
        return entry

    async def _queue_if_lost(
        self, keys: UserKeys, context_id: str, task_id: str, job_json: bytes
    ) -> None:
        """Cluster mode, a replayed message: if the first attempt died before queueing its
        job, queue it now (a job queued twice runs once: attempts are fenced)."""
        tasks = keys.context(context_id).tasks
        mark = await self.client.hget(tasks, task_field(task_id, f.JOB))
        if mark is not None and _text(mark).startswith(f.PENDING_MARK):
            seq = int(_text(mark).removeprefix(f.PENDING_MARK))
            stored: Any = await self.client.hget(
                tasks, task_field(task_id, f"{f.WAITING_JOB}{seq}")
            )
            if stored is None:
                stored = orjson.dumps(orjson.loads(job_json) | {"c": context_id, "k": task_id})
            await self._queue_job(keys, context_id, task_id, stored, seq)

    async def _ack_job(self, entry: str) -> None:
        """Cluster mode's second step of a finished (or moot) run: drop its job (a mark that
        is not a stream entry, 'pending:<seq>', names none)."""
        if self.cluster and entry and ":" not in entry:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xack(JOBS, JOBS_GROUP, entry)
                pipe.xdel(JOBS, entry)
                await pipe.execute()

    async def _moved_pushes(self, keys: UserKeys, context_id: str, pushed: bool) -> None:
        """Cluster mode's second step of a write whose script said 'push': its deliveries,
        waiting in the context's slot, go to the push stream. Best effort: the write is
        stored, so a failure here must not report it failed (a retried write would repeat
        it); what is not moved now, maintenance's sweep moves after the lease."""
        if self.cluster and pushed:
            try:
                await self.move_pushes(keys.pending_pushes(context_id))
            except RedisError as error:
                log.warning("push deliveries left for the sweep: %s", type(error).__name__)

    async def note_push_context(self, keys: UserKeys, context_id: str) -> None:
        """Cluster mode, before a write that gives a task a webhook: list the context's
        pending deliveries among those maintenance sweeps (in the jobs slot, so it cannot
        be in the write's own step; noted first, it is never missing when needed)."""
        if self.cluster:
            pending = keys.pending_pushes(context_id)
            await self.client.zadd(PUSH_CONTEXTS, {pending: now_ms()}, nx=True)

    async def move_pushes(self, pending: str, *, stale_only: bool = False) -> int:
        """Move the deliveries waiting in ``pending`` (a context's '<meta>:push') to the push
        stream: each is taken (so no other mover takes it within ``push_lease_ms``), added to
        the stream, then removed. A crash in between leaves it for the sweep (the event id
        is in the delivery: a repeat reaches the webhook under the same id). ``stale_only``:
        only those waiting (or taken) for longer than the lease. Returns how many moved."""
        moved, batch = 0, 100
        while True:
            which = "stale" if stale_only else "all"
            args = TakePushesArgs(now_ms(), self.push_lease_ms, which, batch)
            taken = take_pushes_reply(
                await self.scripts.take_pushes(keys=[pending], args=args.argv())
            )
            if not taken:
                return moved
            async with self.client.pipeline(transaction=False) as pipe:
                for job in taken:
                    pipe.xadd(PUSH, {f.ENTRY_JOB: job})
                await pipe.execute()
            await self.client.zrem(pending, *taken)
            moved += len(taken)
            if len(taken) < batch:
                return moved

    @_translated
    async def sweep_pushes(self) -> int:
        """Cluster mode: move deliveries a process left in their context's slot (it died
        between a write and its second step) to the push stream; returns how many."""
        moved = 0
        async for member, _ in self.client.zscan_iter(PUSH_CONTEXTS, count=500):
            pending = _text(member)
            moved += await self.move_pushes(pending, stale_only=True)
            # A context whose meta key is gone is dead: its entry goes (a send reopening its id with
            # a webhook notes it again).
            if not await self.client.exists(pending.removesuffix(PENDING_PUSHES)):
                await self.client.zrem(PUSH_CONTEXTS, pending)
        return moved
