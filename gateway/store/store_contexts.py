"""A user's contexts (``ContextOps``): whether one exists and what it is about, a page of
them or of one's tasks, a context scrubbed, and the user indexes pruned of expired ones."""

from __future__ import annotations

from gateway.clock import now_ms
from gateway.models import ContextPage, ContextSummary, ScrubReport
from gateway.principal import Principal
from gateway.store import fields as f
from gateway.store.assembly import message_seqs
from gateway.store.assembly import text_of as _text
from gateway.store.fields import TASK_FIELDS as _TASK_FIELDS
from gateway.store.keys import OUTBOX, USER_CONTEXT_INDEXES, UserKeys, keys_of
from gateway.store.lua.context import ScrubArgs, scrub_reply
from gateway.store.store_base import StoreBase
from gateway.store.translate import translated as _translated

__all__ = ["ContextOps"]


class ContextOps(StoreBase):
    """The store's reads of contexts, and their scrub."""

    @_translated
    async def context_exists(self, principal: Principal, context_id: str) -> bool:
        """Whether the user has the context (not expired, not scrubbed)."""
        keys = keys_of(principal)
        return bool(await self.client.exists(keys.meta(context_id)))

    @_translated
    async def context_subject(self, principal: Principal, context_id: str) -> str | None:
        """The subject the context is bound to (None: none, or no such context)."""
        keys = keys_of(principal)
        raw = await self.client.hget(keys.context(context_id).meta, f.META_SUBJECT)
        return self._subject(keys, context_id, raw)

    @_translated
    async def list_contexts(
        self, principal: Principal, limit: int, offset: int
    ) -> tuple[list[ContextSummary], int]:
        """A page of the user's contexts, newest write first, and how many there are."""
        keys = keys_of(principal)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zrevrange(keys.contexts, offset, offset + limit - 1)
            pipe.zcard(keys.contexts)
            ids, count = await pipe.execute()
        total = int(count)
        if not ids:
            return [], total
        async with self.client.pipeline(transaction=False) as pipe:
            for raw in ids:
                cid = _text(raw)
                pipe.hmget(keys.meta(cid), [f.META_CREATED, f.META_UPDATED, f.META_TASKS])
                pipe.pttl(keys.meta(cid))
            replies = await pipe.execute()
        now = now_ms()
        items, stale = [], []
        for i, raw in enumerate(ids):
            (created, updated, tasks), ttl = replies[2 * i], replies[2 * i + 1]
            cid = _text(raw)
            if created is None or ttl < 0:
                stale.append(cid)
                continue
            items.append(
                ContextSummary(cid, int(created), int(updated), now + int(ttl), int(tasks))
            )
        if stale:
            await self.client.zrem(keys.contexts, *stale)
        return items, max(total - len(stale), 0)

    @_translated
    async def read_context(
        self, principal: Principal, context_id: str, limit: int, offset: int
    ) -> ContextPage | None:
        """A page of the context's tasks (oldest first, whole histories); None: no such
        context."""
        keys = keys_of(principal)
        ck = keys.context(context_id)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.pttl(ck.meta)
            pipe.llen(ck.items)
            pipe.lrange(ck.items, offset, offset + limit - 1)
            pipe.hmget(ck.meta, [f.META_EMBED_QUEUED, f.META_EMBEDDED, f.META_SUBJECT])
            ttl, total, tids, (queued, embedded, subject) = await pipe.execute()
        if ttl < 0:
            return None
        fields = [f"{_text(t)}{suffix}" for t in tids for suffix in _TASK_FIELDS]
        raw = await self.client.hmget(ck.tasks, fields) if fields else []
        width = len(_TASK_FIELDS)
        all_seqs = [message_seqs(raw[i + 2]) for i in range(0, len(raw), width)]
        flat = [s for seqs in all_seqs for s in seqs]
        msgs = await self.client.hmget(ck.msgs, flat) if flat else []
        tasks, pos = [], 0
        for n, seqs in enumerate(all_seqs):
            status, arts, _, metadata, extra = raw[width * n : width * n + width]
            history = self._history(keys, context_id, seqs, msgs[pos : pos + len(seqs)])
            pos += len(seqs)
            if status is not None:
                tid = _text(tids[n])
                stored = (status, arts, metadata, extra)
                tasks.append(self._task(keys, context_id, tid, stored, history))
        indexed, queued_n = int(embedded or 0), int(queued or 0)
        return ContextPage(
            context_id,
            tasks,
            int(total),
            limit,
            offset,
            now_ms() + int(ttl),
            indexed,
            max(0, queued_n - indexed),
            self._subject(keys, context_id, subject),
        )

    @_translated
    async def scrub(
        self, principal: Principal, context_id: str, forget_job: bytes = b""
    ) -> ScrubReport | None:
        """Delete the context; with ``forget_job`` its ledger's memories are queued for
        deletion in Cortadel in the same step (on a cluster, in a second one). Returns what
        was removed from the context's keys (no dead letters: they live elsewhere), or None
        when there was no such context."""
        keys = keys_of(principal)
        args = ScrubArgs(context_id, forget_job, self.ttl_ms)
        reply = await self.scripts.scrub(keys=self._keys(keys, context_id), args=args.argv())
        scrubbed = scrub_reply(reply)
        if scrubbed is None:
            return None
        if forget_job and self.cluster:
            ids = b",".join(scrubbed.forget)
            await self.client.xadd(OUTBOX, {f.ENTRY_JOB: forget_job, f.ENTRY_FORGET: ids})
        if self.disk_rewrite is not None:
            await self.disk_rewrite.schedule()
        messages, tasks, vectors, pending_jobs, memories_queued = scrubbed.counts
        return ScrubReport(messages, tasks, vectors, pending_jobs, 0, memories_queued)

    @_translated
    async def prune_indexes(self) -> int:
        """Remove index entries (contexts, task and origin pointers) of expired contexts.
        Idempotent; returns how many entries went."""
        removed = 0
        async for key in self.client.scan_iter(match=USER_CONTEXT_INDEXES, count=500):
            user = UserKeys.of_contexts(_text(key))
            alive: dict[str, bool] = {}

            async def live(cid: str, user: UserKeys = user, alive: dict[str, bool] = alive) -> bool:
                if cid not in alive:
                    alive[cid] = bool(await self.client.exists(user.meta(cid)))
                return alive[cid]

            dead = [_text(c) for c in await self.client.zrange(key, 0, -1)]
            dead = [c for c in dead if not await live(c)]
            if dead:
                removed += int(await self.client.zrem(key, *dead))
            for index in (user.task_index, user.origins):
                stale = [
                    f
                    async for f, cid in self.client.hscan_iter(index)
                    if not await live(_text(cid))
                ]
                if stale:
                    removed += int(await self.client.hdel(index, *stale))
        return removed
