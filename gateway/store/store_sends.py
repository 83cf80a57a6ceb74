"""A user message stored (``SendOps.send``): the send script's arguments built, its content
sealed, its reply turned into a ``StoredSend`` or the refusal it names, and, on a cluster,
its second steps taken.

How the message's run is queued (``Queueing``) is the caller's to say: the engine's run
hand-off chooses it (``engine/hand_off.py``); the store only spells it as the script's
flags."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from gateway.clock import now_ms
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
from gateway.principal import Principal
from gateway.store import fields as f
from gateway.store.fields import task_field
from gateway.store.keys import EMBEDS, UserKeys, keys_of
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

__all__ = ["OnBusy", "Queueing", "RunQueue", "SendOps", "SendWrite", "StoredSend"]


class RunQueue(Enum):
    """Where the run of a stored message is queued (its value: the send script's flag)."""

    NONE = ""  # nowhere: the message is only stored (contexts filled through the store)
    STREAM = "r"  # on the jobs stream, atomically with the message
    LOCAL = "l"  # by this process's queue (the in-process queue)


class OnBusy(Enum):
    """What a message continuing a task whose run is under way does (its value: the send
    script's flag): wait for that run to settle, be refused, or supersede it."""

    WAIT = "w"
    REFUSE = "x"
    SUPERSEDE = "i"


@dataclass(frozen=True, slots=True)
class Queueing:
    """How a stored message's run is queued: where (``queue``), whether a consumer of this
    process takes the next job of the stream at once (``claimant``, '' for none), and what
    the message does when its task's run is under way (``on_busy``)."""

    queue: RunQueue = RunQueue.NONE
    claimant: str = ""
    on_busy: OnBusy = OnBusy.WAIT


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
    queueing: Queueing = field(default_factory=Queueing)  # how the message's run is queued
    embed: bool = False  # queue the user message for embedding
    embed_text: str = ""  # its embeddable text, handed to this process's indexer
    # Quotas checked by the send script: messages and bytes per context, contexts per user
    # (0: none).
    quotas: tuple[int, int, int, int] = (0, 0, 0, 0)
    push_config_json: bytes = b""  # a webhook for the task (its config, with its id)
    subject: str = ""  # what a new context is about (``message.metadata.subject``), or ""
    # The client named the context, which this message opens if the user does not have it
    # (unless it was scrubbed within the retention: then it stays unknown).
    named: bool = False

    def queued(self, queueing: Queueing) -> SendWrite:
        """The write with its run queued as ``queueing``: ``dataclasses.replace``, without
        its checks of every field (a third of the cost; one is made for every send)."""
        write = copy.copy(self)
        object.__setattr__(write, "queueing", queueing)
        return write


@dataclass(frozen=True)
class StoredSend:
    """What the store answers for a stored message: its context, task and seq, whether it
    was a replay, and for a message whose run starts now that run's inputs and job."""

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
    async def send(self, principal: Principal, w: SendWrite) -> StoredSend:
        """Record a user message atomically; a repeated messageId returns the original."""
        keys = keys_of(principal)
        mode = "new" if w.new_context else "named" if w.named else "continue"
        return await self._send(keys, w, mode, w.context_id, "")

    async def _send(
        self, keys: UserKeys, w: SendWrite, mode: str, context_id: str, stale: str
    ) -> StoredSend:
        if w.push_config_json:
            await self.note_push_context(keys, context_id)
        args = self._send_args(keys, w, mode, context_id, stale)
        reply = await self._hot(self.scripts.send, self._keys(keys, context_id), args.argv())
        match send_reply(reply):
            case SendAccepted() as accepted:
                self._hand_text(keys, w, context_id, accepted.seq)
                return await self._accepted(keys, w, context_id, accepted)
            case SendWaiting(task_id, seq):
                self._hand_text(keys, w, context_id, seq)
                if self.cluster and w.embed:
                    await self.client.xadd(EMBEDS, {f.ENTRY_JOB: w.job_json, f.ENTRY_SEQ: seq})
                return StoredSend(context_id, task_id, seq, False, waiting=True)
            case SendDuplicate(task_id, digest, seq):
                if digest != w.digest:
                    raise IdempotencyConflictError()
                if self.cluster and w.queueing.queue is RunQueue.STREAM:
                    await self._queue_if_lost(keys, context_id, task_id, w.job_json)
                return StoredSend(context_id, task_id, seq, duplicate=True)
            case SendOrigin(origin):
                return await self._retry_opening(keys, w, origin)
            case SendRefused(kind, detail):
                self._raise_refusal(kind, detail, w.continuing)
                raise AssertionError(kind)  # pragma: no cover

    def _hand_text(self, keys: UserKeys, w: SendWrite, context_id: str, seq: int) -> None:
        """The stored message's text, for this process's indexer (when it has one)."""
        if w.embed and w.embed_text and self.embed_texts is not None:
            self.embed_texts.put(keys.prefix, context_id, seq, w.embed_text)

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
            claimant="" if self.cluster else w.queueing.claimant,
            flags=w.queueing.queue.value + ("e" if w.embed else "") + w.queueing.on_busy.value,
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
    ) -> StoredSend:
        """An accepted message whose run starts now."""
        task_id, seq, entry = reply.task_id, reply.seq, reply.entry
        inputs = self._run_inputs(
            keys, context_id, w.reference_ids, seq, w.message_json, reply.referenced
        )
        if self.cluster:
            await self._ack_job(reply.superseded)
            if w.queueing.queue is RunQueue.STREAM:
                entry = await self._queue_job(keys, context_id, task_id, w.job_json, seq)
            if w.embed:
                await self.client.xadd(EMBEDS, {f.ENTRY_JOB: w.job_json, f.ENTRY_SEQ: seq})
            await self._moved_pushes(keys, context_id, reply.pushed)
        return StoredSend(context_id, task_id, seq, False, inputs, entry, reply.claimed)

    async def _retry_opening(self, keys: UserKeys, w: SendWrite, origin: str) -> StoredSend:
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
