"""The long-term memory outbox: delivers turns to Cortadel and deletes scrubbed memories.

Jobs come from the ``gw:{jobs}:ltm`` stream (ids only), queued atomically with the
write that finished a turn, or with the scrub of a context. A batch's turns are
grouped per context and sent as one ``from-conversation`` call, each message with its
``messageId`` as ``uuid``, so a repeated delivery is recognised by Cortadel
(exactly once in effect). While Cortadel is down the batch is retried with backoff
and jitter, its leases renewed, so nothing is lost and nothing is reclaimed; a
request Cortadel refuses (4xx) goes to the dead letters with its status.

A turn whose context is gone (scrubbed or expired) is dropped. Memories Cortadel
adds are written to the context's ledger; if the context was scrubbed meanwhile, the
ledger refuses them and they are deleted at once, so no memory outlives its scrub.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import orjson

from gateway import metrics, tracing
from gateway.audit.entry import AuditEntry
from gateway.backoff import Backoff, RetryPolicy
from gateway.clock import now_ms
from gateway.longterm.cortadel import Cortadel, CortadelUnavailable, retryable
from gateway.longterm.erasure import sweep_session
from gateway.longterm.render import turn_text
from gateway.longterm.wire import OutboxJob
from gateway.principal import Principal
from gateway.store.audit_store import AuditStore
from gateway.store.jobs import Entry, JobStore
from gateway.store.longterm_store import LongTermStore, TurnRef
from gateway.stream_consumer import BatchConsumer

__all__ = ["Outbox"]

log = logging.getLogger("gateway.cortadel")

T = TypeVar("T")
_DELETE_CHUNK = 500
_PARALLEL = 8


class _Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"cortadel refused the request (status {status})")
        self.status = status


def _span(batch: list[OutboxJob]) -> AbstractContextManager[Any]:
    """One delivery's span: in the trace of the send (or scrub) that queued its first job."""
    first = batch[0]
    return tracing.job_span(
        "gateway.outbox.forget" if first.forget else "gateway.outbox.store",
        [job.trace for job in batch],
        {
            "gateway.context.id": first.context_id,
            "messaging.system": "redis",
            "messaging.batch.message_count": len(batch),
        },
    )


class Outbox(BatchConsumer):
    name = "ltm-outbox"

    def __init__(
        self,
        cortadel: Cortadel,
        store: LongTermStore,
        jobs: JobStore,
        *,
        consumer: str,
        header: str,
        batch: int,
        block_ms: int,
        lease_seconds: float,
        backoff_cap: float,
        forget_scrubbed: bool = True,
        audit: AuditStore | None = None,
    ) -> None:
        super().__init__(
            jobs, consumer=consumer, batch=batch, block_ms=block_ms, lease_seconds=lease_seconds
        )
        self._cortadel, self._store, self._header = cortadel, store, header
        # Cortadel's answers that may pass are tried again until they do, unless stopping.
        self._cortadel_retry = RetryPolicy(
            Backoff(0.2, backoff_cap), lambda exc: retryable(exc) and not self._closing
        )
        # Whether a scrub deletes a context's memories (GATEWAY_CORTADEL_SCRUB), and so
        # those of turns that land after it.
        self._forget_scrubbed = forget_scrubbed
        self._audit = audit

    async def process(self, entries: list[Entry]) -> None:
        await self.deliver(entries)

    async def deliver(self, entries: list[tuple[str, dict[bytes, bytes]]]) -> None:
        jobs = [OutboxJob.from_wire(e, f) for e, f in entries]
        stores = [j for j in jobs if not j.forgets]
        groups: dict[tuple[str, str, str, str, bytes], list[OutboxJob]] = defaultdict(list)
        for job in stores:
            key = (job.tenant, job.user, job.context_id, job.subject, orjson.dumps(job.options))
            groups[key].append(job)
        turns = await self._store.turns(_refs(stores))
        turn_of = {j.entry: t for j, t in zip(stores, turns, strict=True)}
        gate = asyncio.Semaphore(_PARALLEL)

        async def one(work: Callable[[], Awaitable[None]], batch: list[OutboxJob]) -> None:
            async with gate:
                with _span(batch):
                    try:
                        await work()
                    except _Refused as exc:
                        tracing.failed(exc)
                        tracing.annotate({"gateway.outbox.refused_status": exc.status})
                        for job in batch:
                            await self.jobs.dead_letter(job.entry, job.fields, str(exc))
                        log.error("outbox job refused by cortadel", extra={"status": exc.status})
                        return
                    await self.jobs.ack([j.entry for j in batch])

        tasks = [
            one(functools.partial(self._store_turns, g, [turn_of[j.entry] for j in g]), g)
            for g in groups.values()
        ]
        tasks += [one(functools.partial(self._forget_for_scrub, j), [j]) for j in jobs if j.forgets]
        await asyncio.gather(*tasks)

    async def _store_turns(self, group: list[OutboxJob], turns: list[list[dict[str, Any]]]) -> None:
        from cortadel import ChatMessage, ConversationOptions

        first = group[0]
        messages = [
            ChatMessage(
                role="user" if m.get("role") == "user" else "assistant",
                content=text,
                uuid=m.get("messageId"),
            )
            for turn in turns
            for m in turn
            if (text := turn_text(m, self._header, bool(first.options.get("data"))))
        ]
        if not messages:
            gone = not any(turns)
            metrics.TURNS_DROPPED.labels("gone" if gone else "empty").inc(len(group))
            tracing.annotate({"gateway.outbox.dropped": "gone" if gone else "empty"})
            if not gone:  # nothing to store: as good as stored, for a send waiting for it
                await self._store.mark_stored(_refs(group))
            return
        o = first.options
        options = ConversationOptions(
            is_agent_memory=bool(o.get("agent")),
            tags=o.get("tags") or None,
            project=o.get("project"),
            session_id=first.context_id,
        )
        app = str(o.get("app") or "gateway")

        async def store() -> Any:
            client = self._cortadel.client(first.tenant, first.user, app, self._subject(first))
            return await client.add_conversation(messages, options)

        result = await self._retrying(store)
        # Every memory Cortadel names for the turn: added, updated, or an earlier one the
        # turn was merged into as a duplicate (a scrub deletes them all).
        added = [r.id for r in result.results or () if r.id and r.event != "ERROR"]
        tracing.annotate(
            {"gateway.outbox.messages": len(messages), "gateway.outbox.added": len(added)}
        )
        metrics.TURNS_STORED.inc(len(group))
        recorded = await self._store.add_to_ledger(
            Principal(first.tenant, first.user), first.context_id, added
        )
        if not recorded and self._forget_scrubbed:
            # The context was scrubbed while its turns were on their way: delete them too.
            await self._forget(first, tuple(added))
        elif recorded:
            await self._store.mark_stored(_refs(group))

    def _subject(self, job: OutboxJob) -> str | None:
        return self._store.subject(Principal(job.tenant, job.user), job.context_id, job.subject)

    async def _forget_for_scrub(self, job: OutboxJob) -> None:
        """Delete a scrub's memories (its ledger's, then what else Cortadel finds in the
        context's session), then record the deletion in the audit trail, linked to the
        scrub (its request id): the second half of the scrub's receipt."""
        await self._forget(job, job.forget)
        swept: list[str] = []
        if job.sweep:

            async def client() -> Any:
                return self._cortadel.client(job.tenant, job.user, subject=self._subject(job))

            sweeper = await self._retrying(client)
            swept = await sweep_session(sweeper, job.context_id, set(job.forget), self._retrying)
            metrics.MEMORIES_FORGOTTEN.inc(len(swept))
        if self._audit is None:
            return
        entry = AuditEntry(
            time_ms=now_ms(),
            tenant=job.tenant,
            user=job.user,
            credential="outbox",
            operation="forget_memories",
            method="OUTBOX",
            status=200,
            request_id="",
            ids={"context": job.context_id, "scrub": job.scrub},
            receipt={"memories": len(job.forget) + len(swept)},
        )
        try:
            await self._audit.append([entry])
        except Exception as exc:  # the deletion is done; its record is best effort
            log.warning(
                "deletion not recorded in the audit trail", extra={"error": type(exc).__name__}
            )

    async def _forget(self, job: OutboxJob, ids: tuple[str, ...]) -> None:
        for start in range(0, len(ids), _DELETE_CHUNK):
            chunk = list(ids[start : start + _DELETE_CHUNK])

            async def delete(chunk: list[str] = chunk) -> str:
                client = self._cortadel.client(job.tenant, job.user, subject=self._subject(job))
                return await client.delete(chunk)

            await self._retrying(delete)
            metrics.MEMORIES_FORGOTTEN.inc(len(chunk))
            tracing.event("forgotten", {"gateway.outbox.memories": len(chunk)})

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await self._cortadel_retry.call(call, on_retry=_retried)
        except Exception as exc:
            if not retryable(exc):
                raise _Refused(int(getattr(exc, "status", 0))) from exc
            raise  # stopping


def _refs(group: list[OutboxJob]) -> list[TurnRef]:
    return [TurnRef(Principal(j.tenant, j.user), j.context_id, j.task_id, j.seq) for j in group]


def _retried(exc: BaseException) -> None:
    metrics.LTM_RETRIES.inc()
    reason = exc.reason if isinstance(exc, CortadelUnavailable) else type(exc).__name__
    tracing.event("retry", {"reason": reason, "status": int(getattr(exc, "status", 0))})
    log.warning(
        "cortadel unavailable; retrying",
        extra={"reason": reason, "status": getattr(exc, "status", None)},
    )
