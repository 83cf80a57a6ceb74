"""A user message stored (``SendOps.send``): the send script's arguments built, its content
sealed, its reply turned into a ``SendResult`` or the refusal it names, and, on a cluster,
its second steps taken."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.errors import (
    ContextNotFoundError,
    IdempotencyConflictError,
    InvalidParamsError,
    QuotaExceededError,
    StoreUnavailableError,
    TaskBusyError,
    TaskNotContinuableError,
    TaskNotFoundError,
)
from gateway.store import fields as f
from gateway.store.assembly import now_ms
from gateway.store.fields import task_field
from gateway.store.keys import EMBEDS, UserKeys
from gateway.store.lua.send import (
    SendAccepted,
    SendArgs,
    SendDuplicate,
    SendOrigin,
    SendRefused,
    SendWaiting,
    send_reply,
)
from gateway.store.push_records import seal_config
from gateway.store.store_base import RunInputs
from gateway.store.store_cluster import ClusterSteps
from gateway.store.translate import translated as _translated

__all__ = ["RunPolicy", "SendOps", "SendResult", "SendWrite"]


_POLICY_FLAGS = {"enqueue": "w", "reject": "x", "interrupt": "i"}

# What a message that continues a task whose run is under way does: wait for that run to
# settle, be refused, or supersede it.
RunPolicy = Literal["enqueue", "reject", "interrupt"]


@dataclass(frozen=True)
class SendWrite:
    """Everything one accepted message writes."""

    context_id: str
    task_id: str
    continuing: bool
    new_context: bool
    message_id: str
    digest: str
    message_json: bytes
    metadata_json: bytes
    status_json: bytes
    reference_ids: Sequence[str]
    job_json: bytes = b""  # the job's ids, for the job streams
    queue_run: bool = False  # queue the run on the jobs stream, atomically with the message
    local_run: bool = False  # the run is this process's (in-process queue)
    claimant: str = ""  # a consumer of this process that takes the next job at once
    embed: bool = False  # queue the user message for embedding
    policy: RunPolicy = "enqueue"  # for a continued task whose run is under way
    # Quotas checked by the send script: messages and bytes per context, contexts per user
    # (0: none).
    quotas: tuple[int, int, int, int] = (0, 0, 0, 0)
    push_config_json: bytes = b""  # a webhook for the task (its config, with its id)
    subject: str = ""  # what a new context is about (``message.metadata.subject``), or ""
    # The client named the context, which this message opens if the user does not have it
    # (unless it was scrubbed within the retention: then it stays unknown).
    named: bool = False


@dataclass(frozen=True)
class SendResult:
    context_id: str
    task_id: str
    seq: int
    duplicate: bool
    inputs: RunInputs | None = None
    entry: str = ""  # this message's job on the stream
    claimed: tuple[str, dict[bytes, bytes]] | None = None  # the job the claimant took
    waiting: bool = False  # stored; its run is queued when the runs before it settle


class SendOps(ClusterSteps):
    """The store's sends."""

    @_translated
    async def send(self, keys: UserKeys, w: SendWrite) -> SendResult:
        """Record a user message atomically; a repeated messageId returns the original."""
        mode = "new" if w.new_context else "named" if w.named else "continue"
        return await self._send(keys, w, mode, w.context_id, "")

    async def _send(
        self, keys: UserKeys, w: SendWrite, mode: str, context_id: str, stale: str
    ) -> SendResult:
        if w.push_config_json:
            await self.note_push_context(keys, context_id)
        args = self._send_args(keys, w, mode, context_id, stale)
        reply = await self._hot(self.scripts.send, self._keys(keys, context_id), args.argv())
        match send_reply(reply):
            case SendAccepted() as accepted:
                return await self._accepted(keys, w, context_id, accepted)
            case SendWaiting(task_id, seq):
                if self.cluster and w.embed:
                    await self.client.xadd(EMBEDS, {f.ENTRY_JOB: w.job_json, f.ENTRY_SEQ: seq})
                return SendResult(context_id, task_id, seq, False, waiting=True)
            case SendDuplicate(task_id, digest, seq):
                if digest != w.digest:
                    raise IdempotencyConflictError()
                if self.cluster and w.queue_run:
                    await self._queue_if_lost(keys, context_id, task_id, w.job_json)
                return SendResult(context_id, task_id, seq, duplicate=True)
            case SendOrigin(origin):
                return await self._retry_opening(keys, w, origin)
            case SendRefused(kind, detail):
                self._raise_refusal(kind, detail, w.continuing)
                raise AssertionError(kind)  # pragma: no cover

    def _send_args(
        self, keys: UserKeys, w: SendWrite, mode: str, context_id: str, stale: str
    ) -> SendArgs:
        """The send script's arguments, the message's content sealed."""
        return SendArgs(
            mode=mode,
            cid=context_id,
            mid=w.message_id,
            digest=w.digest,
            tid=w.task_id,
            continuing="1" if w.continuing else "0",
            message=self._seal(keys, context_id, "msg", w.message_json),
            metadata=self._seal(
                keys, context_id, task_field(w.task_id, f.METADATA), w.metadata_json
            ),
            status=self._seal(keys, context_id, task_field(w.task_id, f.STATUS), w.status_json),
            now=now_ms(),
            ttl=self.ttl_ms,
            stale_origin=stale,
            job=w.job_json,
            claimant="" if self.cluster else w.claimant,
            flags=("r" if w.queue_run else "")
            + ("l" if w.local_run else "")
            + ("e" if w.embed else "")
            + _POLICY_FLAGS[w.policy],
            quotas=",".join(str(q) for q in w.quotas),
            push_config=seal_config(
                self.sealer, keys.prefix, context_id, w.task_id, w.push_config_json
            ),
            subject=self._seal(keys, context_id, f.META_SUBJECT, w.subject.encode())
            if w.subject and mode in ("new", "named")
            else b"",
            refs=list(w.reference_ids),
        )

    async def _accepted(
        self, keys: UserKeys, w: SendWrite, context_id: str, reply: SendAccepted
    ) -> SendResult:
        """An accepted message whose run starts now."""
        task_id, seq, entry = reply.task_id, reply.seq, reply.entry
        inputs = self._run_inputs(
            keys, context_id, w.reference_ids, seq, w.message_json, reply.referenced
        )
        if self.cluster:
            await self._ack_job(reply.superseded)
            if w.queue_run:
                entry = await self._queue_job(keys, context_id, task_id, w.job_json, seq)
            if w.embed:
                await self.client.xadd(EMBEDS, {f.ENTRY_JOB: w.job_json, f.ENTRY_SEQ: seq})
            await self._moved_pushes(keys, context_id, reply.pushed)
        return SendResult(context_id, task_id, seq, False, inputs, entry, reply.claimed)

    async def _retry_opening(self, keys: UserKeys, w: SendWrite, origin: str) -> SendResult:
        """The messageId already opened a context: replay it, or reopen if that one is gone."""
        try:
            return await self._send(keys, w, "continue", origin, "")
        except ContextNotFoundError:
            return await self._send(keys, w, "new", w.context_id, origin)

    @staticmethod
    def _raise_refusal(kind: str, rest: list[str], continuing: bool) -> None:
        if kind == "nocontext":
            raise ContextNotFoundError()
        if kind == "notask":
            raise TaskNotFoundError()
        if kind == "terminal":
            raise TaskNotContinuableError(data={"state": rest[0]})
        if kind == "busy":
            raise TaskBusyError()
        if kind == "quota":
            raise QuotaExceededError(rest[0], int(rest[1]))
        if kind == "pushfull":
            raise InvalidParamsError("A task takes at most 10 push notification configs")
        if kind == "badrefs":
            raise InvalidParamsError(
                "referenceTaskIds name tasks that are not in this context",
                data={"unknownTaskIds": rest},
            )
        raise StoreUnavailableError()
