"""The store: every read and write of gateway state, over one Redis client.

Redis exceptions become ``StoreUnavailableError`` through ``translate.translated``. Content
(messages, status, artifacts, metadata) is sealed here on its way in and opened on its way
out (``sealing.py``): nothing above the store sees ciphertext, nothing below it plaintext.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson
from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from gateway.a2a import INTERRUPTED, TERMINAL
from gateway.errors import (
    ContextNotFoundError,
    IdempotencyConflictError,
    InvalidParamsError,
    QuotaExceededError,
    StoredDataUnreadableError,
    StoreUnavailableError,
    TaskBusyError,
    TaskNotContinuableError,
    TaskNotFoundError,
)
from gateway.models import ContextPage, ContextSummary, RawJson, ScrubReport, Task
from gateway.store import fields as f
from gateway.store import unreadable
from gateway.store.assembly import (
    assemble_task,
    message_seqs,
    now_ms,
    with_open_artifact,
)
from gateway.store.assembly import text_of as _text
from gateway.store.disk_rewrite import DiskRewrite
from gateway.store.fields import TASK_FIELDS as _TASK_FIELDS
from gateway.store.fields import task_field
from gateway.store.keys import (
    CONTEXT_KEY_COUNT,
    EMBEDS,
    JOBS,
    JOBS_GROUP,
    OUTBOX,
    PENDING_PUSHES,
    PUSH,
    PUSH_CONTEXTS,
    UserKeys,
)
from gateway.store.multiplex import Multiplexed
from gateway.store.push_records import seal_config
from gateway.store.replies import (
    SendAccepted,
    SendDuplicate,
    SendOrigin,
    SendRefused,
    SendWaiting,
    begin_run_reply,
    cancel_reply,
    scrub_reply,
    send_reply,
    take_pushes_reply,
    update_reply,
)
from gateway.store.scripts import (
    BeginRunArgs,
    CancelArgs,
    RecordJobArgs,
    Scripts,
    ScrubArgs,
    SendArgs,
    TakePushesArgs,
    UpdateArgs,
    argv,
)
from gateway.store.sealing import Sealer, context_of
from gateway.store.translate import translated as _translated
from gateway.store.vector_rows import vector_rows

__all__ = [
    "RunInputs",
    "RunPolicy",
    "SendResult",
    "SendWrite",
    "Store",
    "TaskUpdate",
    "UpdateResult",
]

log = logging.getLogger("gateway.store")

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
class RunInputs:
    """What a run gives the agent: its message (at ``seq``) and the referenced tasks (their
    status and artifacts); its history is the context's messages up to ``last`` bar its own
    and those still ``waiting`` for the task (a run that waited its turn sees the replies to
    the messages before it)."""

    message: dict[str, Any]
    seq: int
    referenced: list[Task]
    last: int = 0  # the context's last message when the run began (0: the one before seq)
    waiting: frozenset[int] = frozenset()


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
    embed_entry: str = ""  # the message's embedding job on the stream (standalone Redis)


@dataclass(frozen=True)
class RunVector:
    """The vector of a run's own message, added with the run's last write (``TaskUpdate``);
    its embedding job (``entry``) is then done."""

    entry: str
    model: str
    dimensions: int
    seq: int
    vector: bytes  # float32, little-endian


@dataclass(frozen=True)
class TaskUpdate:
    """One write of a run's progress to its task (``Store.update_task``).

    ``state`` "" leaves the status as it is. The write is skipped when ``required_state`` is
    given and the task is no longer in it, and fenced when ``attempt`` no longer owns the
    run. ``seq`` names the run's message; with ``finish`` that run is recorded as done and
    its job ``entry`` acknowledged in the same step, and, given an ``outbox_job``, a turn that
    ended completed or input-required is queued for long-term memory. ``metadata_json`` (the
    agent's metadata of this run) replaces what earlier runs reported.

    A finishing write while messages wait for the task queues the next one's run (on the
    jobs stream, or, ``queued_locally``, returned as ``next_run`` for this process's queue)
    and leaves the task ``submitted`` with ``next_status_json``.

    ``artifact_events`` go to the task's event stream (``event_log.py``) with the write;
    ``open_artifact`` is the artifact being streamed as it stands (``b"-"``: closed).

    ``vector`` (standalone Redis) is added to the context's vectors whatever the write's
    outcome, and its embedding job is then done, unless the context's vectors refuse it
    (another model or form, the seq already embedded): the indexer then takes the job."""

    context_id: str
    task_id: str
    state: str
    status_json: bytes
    artifacts: Sequence[bytes] = ()
    message_json: bytes | None = None
    required_state: str = ""
    attempt: str = ""
    seq: int = 0
    finish: bool = False
    entry: str = ""
    outbox_job: bytes = b""
    metadata_json: bytes = b""
    queued_locally: bool = False
    next_status_json: bytes = b""
    artifact_events: Sequence[bytes] = ()
    open_artifact: bytes = b""
    vector: RunVector | None = None  # the run's own message's vector, added with the write


@dataclass(frozen=True)
class UpdateResult:
    outcome: Literal["ok", "gone", "terminal", "skipped", "fenced", "moot"]
    # The task's artifacts, given with a write that finishes the run or settles the task.
    artifacts_json: bytes | None = None
    chained: bool = False  # the run settled while messages waited: the next one is queued
    # The next waiting message's run (its seq and job fields) when the caller queues it
    # itself (the in-process queue).
    next_run: tuple[int, bytes] | None = None
    embedded: bool = False  # the write added ``TaskUpdate.vector``: its embedding job is done


def _artifact_ids(artifacts: Sequence[bytes]) -> bytes:
    """The artifactIds of artifacts (JSON), one per line: what an artifact update names."""
    ids = (str(orjson.loads(a).get("artifactId") or "") for a in artifacts)
    return "\n".join(i.replace("\n", " ") for i in ids).encode()


class Store:
    def __init__(
        self,
        client: Any,
        ttl_seconds: int,
        *,
        cluster: bool = False,
        sealer: Sealer | None = None,
        hot: Multiplexed | None = None,
    ) -> None:
        self.client: Redis = client
        # The send and update scripts of concurrent requests, written together on one
        # connection (multiplex.py); None: through ``client`` like every other command.
        self.hot = hot
        self.ttl_ms = ttl_seconds * 1000
        self.cluster = cluster
        # Webhooks get artifact updates (GATEWAY_PUSH_ARTIFACTS): updates name their artifacts.
        self.push_artifacts = False
        # Cluster mode: a delivery taken to be moved to the push stream is taken again by
        # another mover (maintenance) if it is still there this long after.
        self.push_lease_ms = 30_000
        self.scripts = Scripts.register(client)
        self.sealer = sealer or Sealer(None)
        # Set when scrubs schedule a rewrite of Redis's files (see disk_rewrite.py).
        self.disk_rewrite: DiskRewrite | None = None

    async def _hot(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """A script on the hot path: multiplexed when the store has a hot connection."""
        if self.hot is not None:
            return await self.hot.script(script, keys, args)
        return await script(keys=keys, args=args)

    async def _read(self, command: str, key: str, *args: Any) -> Any:
        """A short read on the hot path (a task's polling, a waiter's check): multiplexed
        when the store has a hot connection, beside the scripts."""
        if self.hot is not None:
            return await self.hot.execute(command, key, *args)
        return await self.client.execute_command(command, key, *args)  # type: ignore[no-untyped-call]

    # -- sealing: every content field is bound to its user, context and field --------------

    def open_message(self, keys: UserKeys, context_id: str, raw: bytes) -> bytes:
        return self.sealer.open(raw, context_of(keys.prefix, context_id, "msg"))

    def _seal(self, keys: UserKeys, context_id: str, field: str, plain: bytes) -> bytes:
        return self.sealer.seal(plain, context_of(keys.prefix, context_id, field))

    def _open(self, keys: UserKeys, context_id: str, field: str, raw: Any) -> Any:
        if raw is None or raw == b"":
            return raw
        return self.sealer.open(raw, context_of(keys.prefix, context_id, field))

    def _open_or(
        self, keys: UserKeys, context_id: str, field: str, raw: Any, stand_in: Callable[[], bytes]
    ) -> Any:
        """``_open``, or ``stand_in()`` (``unreadable.py``) when the value does not open."""
        try:
            return self._open(keys, context_id, field, raw)
        except StoredDataUnreadableError:
            return stand_in()

    def _open_artifacts(
        self,
        keys: UserKeys,
        context_id: str,
        task_id: str,
        raw: Any,
        known: Mapping[bytes, bytes] | None = None,
    ) -> Any:
        aad = context_of(keys.prefix, context_id, task_field(task_id, f.ARTIFACTS))
        return self.sealer.open_artifacts(raw, aad, known, unreadable.artifact)

    def _task(
        self,
        keys: UserKeys,
        context_id: str,
        task_id: str,
        fields: Sequence[Any],
        history: list[bytes] | None,
        streamed: Any = None,
    ) -> Task:
        """A task from its stored (sealed) status, artifacts, metadata and agent metadata;
        ``streamed``: the artifact a run is streaming, shown after the others. A value that
        does not open is shown as its stand-in (``unreadable.py``)."""
        status, arts, metadata, extra = fields

        def opened(suffix: str, raw: Any, stand_in: Callable[[], bytes]) -> Any:
            return self._open_or(keys, context_id, task_field(task_id, suffix), raw, stand_in)

        arts = self._open_artifacts(keys, context_id, task_id, arts)
        streamed = opened(f.OPEN_ARTIFACT, streamed, lambda: unreadable.artifact("streamed"))
        return assemble_task(
            task_id,
            context_id,
            opened(f.STATUS, status, lambda: unreadable.status(context_id)),
            with_open_artifact(arts, streamed),
            history,
            opened(f.METADATA, metadata, unreadable.metadata),
            opened(f.AGENT_METADATA, extra, unreadable.metadata),
        )

    def _history(
        self,
        keys: UserKeys,
        context_id: str,
        seqs: Sequence[Any],
        raw: Sequence[Any],
        *,
        stand_ins: bool = True,
    ) -> list[bytes]:
        """The stored messages ``raw`` (at ``seqs``), opened; one that does not open is its
        stand-in (``unreadable.py``), or left out without ``stand_ins``."""
        out = []
        for seq, m in zip(seqs, raw, strict=True):
            if m is None:
                continue
            try:
                out.append(self.open_message(keys, context_id, m))
            except StoredDataUnreadableError:
                if stand_ins:
                    out.append(unreadable.message(context_id, seq))
        return out

    def _run_inputs(
        self,
        keys: UserKeys,
        context_id: str,
        reference_ids: Sequence[str],
        seq: int,
        message_json: bytes,
        raw: list[Any],
    ) -> RunInputs:
        """A run's inputs: its message (clear JSON) and the referenced tasks as stored."""
        referenced = []
        for n, tid in enumerate(reference_ids):
            status, arts = raw[2 * n], raw[2 * n + 1]
            if status is not None:
                stored = (status, arts, None, None)
                referenced.append(self._task(keys, context_id, tid, stored, None))
        return RunInputs(orjson.loads(message_json), seq, referenced)

    def _keys(self, keys: UserKeys, context_id: str) -> list[str]:
        """A context script's keys; on a cluster without the streams (another slot)."""
        all_keys = keys.context(context_id).all()
        return all_keys[:CONTEXT_KEY_COUNT] if self.cluster else all_keys

    async def _queue_job(
        self, keys: UserKeys, context_id: str, task_id: str, job_json: bytes, seq: int
    ) -> str:
        """Cluster mode's second step of a send: queue the run (ids only), then record its
        entry on the task in place of the 'pending' mark the send script left."""
        entry = _text(await self.client.xadd(JOBS, {f.ENTRY_JOB: job_json, f.ENTRY_SEQ: seq}))
        tasks = keys.context(context_id).tasks
        await self.scripts.record_job(keys=[tasks], args=argv(RecordJobArgs(task_id, seq, entry)))
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
                await self.move_pushes(f"{keys.meta(context_id)}{PENDING_PUSHES}")
            except RedisError as error:
                log.warning("push deliveries left for the sweep: %s", type(error).__name__)

    async def note_push_context(self, keys: UserKeys, context_id: str) -> None:
        """Cluster mode, before a write that gives a task a webhook: list the context's
        pending deliveries among those maintenance sweeps (in the jobs slot, so it cannot
        be in the write's own step; noted first, it is never missing when needed)."""
        if self.cluster:
            pending = f"{keys.meta(context_id)}{PENDING_PUSHES}"
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
                await self.scripts.take_pushes(keys=[pending], args=argv(args))
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

    @_translated
    async def ping(self) -> bool:
        return bool(await self.client.ping())

    # -- writes ---------------------------------------------------------------------------

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
        reply = await self._hot(
            self.scripts.send,
            self._keys(keys, context_id),
            argv(
                SendArgs(
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
                    status=self._seal(
                        keys, context_id, task_field(w.task_id, f.STATUS), w.status_json
                    ),
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
            ),
        )
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
        return SendResult(
            context_id, task_id, seq, False, inputs, entry, reply.claimed, False, reply.embed_entry
        )

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

    @_translated
    async def update_task(self, keys: UserKeys, u: TaskUpdate) -> UpdateResult:
        """Record a run's progress (see ``TaskUpdate``). Refused for terminal or scrubbed
        tasks. Content, artifact events and the open artifact included, is sealed."""
        context_id, task_id, artifacts = u.context_id, u.task_id, u.artifacts
        seq, finish, entry, outbox_job = u.seq, u.finish, u.entry, u.outbox_job
        open_artifact, queued_locally = u.open_artifact, u.queued_locally
        status_field = task_field(task_id, f.STATUS)
        art_aad = context_of(keys.prefix, context_id, task_field(task_id, f.ARTIFACTS))
        events = [
            self._seal(keys, context_id, task_field(task_id, f.EVENTS_SEAL), e)
            for e in u.artifact_events
        ]
        sealed_artifacts = self.sealer.seal_artifacts(list(artifacts), art_aad)
        if open_artifact not in (b"", b"-"):
            open_artifact = self._seal(
                keys, context_id, task_field(task_id, f.OPEN_ARTIFACT), open_artifact
            )
        reply = await self._hot(
            self.scripts.update,
            self._keys(keys, context_id),
            argv(
                UpdateArgs(
                    cid=context_id,
                    tid=task_id,
                    new_state=u.state,
                    status=self._seal(keys, context_id, status_field, u.status_json),
                    artifacts=b",".join(sealed_artifacts),
                    reply=self._seal(keys, context_id, "msg", u.message_json)
                    if u.message_json
                    else b"",
                    now=now_ms(),
                    ttl=self.ttl_ms,
                    required_state=u.required_state,
                    attempt=u.attempt,
                    finish="1" if finish else "0",
                    run_seq=seq,
                    entry=entry,
                    outbox_job=outbox_job,
                    agent_metadata=self._seal(
                        keys, context_id, task_field(task_id, f.AGENT_METADATA), u.metadata_json
                    ),
                    next_queue="l" if queued_locally else "r",
                    next_status=self._seal(keys, context_id, status_field, u.next_status_json),
                    artifact_events=b"".join(b"%d:%s" % (len(e), e) for e in events),
                    open_artifact=open_artifact,
                    artifact_ids=_artifact_ids(artifacts)
                    if self.push_artifacts and artifacts
                    else b"",
                    **self._vector_args(keys, context_id, u.vector),
                )
            ),
        )
        written = update_reply(reply)
        if written.outcome != "ok":
            if (finish and written.outcome != "fenced") or written.outcome == "gone":
                await self._ack_job(entry)
            return UpdateResult(written.outcome, embedded=written.embedded)  # type: ignore[arg-type]
        if written.store_turn:
            await self.client.xadd(OUTBOX, {f.ENTRY_JOB: outbox_job, f.ENTRY_SEQ: seq})
        next_run = None
        if written.chained and written.next_run is not None:
            if queued_locally:
                next_run = written.next_run
            else:  # a cluster: queue it before this run's job is acknowledged
                next_seq, next_job = written.next_run
                await self._queue_job(keys, context_id, task_id, next_job, next_seq)
        await self._moved_pushes(keys, context_id, written.pushed)
        if finish:
            await self._ack_job(entry)
        just_sealed = dict(zip(sealed_artifacts, artifacts, strict=True))
        artifacts_json = self._open_artifacts(
            keys, context_id, task_id, written.artifacts, just_sealed
        )
        return UpdateResult("ok", artifacts_json, written.chained, next_run, written.embedded)

    def _vector_args(self, keys: UserKeys, context_id: str, v: RunVector | None) -> dict[str, Any]:
        """The update script's arguments that add a run's own message's vector."""
        if v is None or self.cluster:
            return {"embed_entry": "", "new_model": "", "new_dims": 0, "vectors": []}
        sealed = self.sealer.seal_writes
        rows = vector_rows(self.sealer, keys.prefix, context_id, [(v.seq, v.vector)], 0, sealed)
        return {
            "embed_entry": v.entry,
            "new_model": v.model,
            "new_dims": v.dimensions,
            "vectors": rows,
        }

    @_translated
    async def cancel_task(
        self, keys: UserKeys, context_id: str, task_id: str, status_json: bytes
    ) -> tuple[str, str | None]:
        reply = await self.scripts.cancel(
            keys=self._keys(keys, context_id),
            args=argv(
                CancelArgs(
                    cid=context_id,
                    tid=task_id,
                    status=self._seal(keys, context_id, task_field(task_id, f.STATUS), status_json),
                    now=now_ms(),
                    ttl=self.ttl_ms,
                )
            ),
        )
        canceled = cancel_reply(reply)
        await self._moved_pushes(keys, context_id, canceled.pushed)
        return canceled.outcome, canceled.state

    @_translated
    async def scrub(
        self, keys: UserKeys, context_id: str, forget_job: bytes = b""
    ) -> ScrubReport | None:
        """Delete the context; with ``forget_job`` its ledger's memories are queued for
        deletion in Cortadel in the same step (on a cluster, in a second one). Returns what
        was removed from the context's keys (no dead letters: they live elsewhere), or None
        when there was no such context."""
        args = ScrubArgs(context_id, forget_job, self.ttl_ms)
        reply = await self.scripts.scrub(keys=self._keys(keys, context_id), args=argv(args))
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

    # -- reads ----------------------------------------------------------------------------

    @_translated
    async def task_context(self, keys: UserKeys, task_id: str) -> str | None:
        raw = await self._read("HGET", keys.task_index, task_id)
        return _text(raw) if raw is not None else None

    @_translated
    async def task_contexts(self, keys: UserKeys) -> dict[str, str]:
        """Every task id of the user with its context id (entries of expired contexts may
        linger until the next prune: their tasks read as None)."""
        raw = await self.client.hgetall(keys.task_index)
        return {_text(k): _text(v) for k, v in raw.items()}

    @_translated
    async def task_statuses(
        self, keys: UserKeys, tasks: Sequence[tuple[str, str]]
    ) -> list[dict[str, Any] | None]:
        """The status of each ``(task id, context id)``, None where the task is gone, in one
        round trip (a listing reads whole tasks only for the page it shows)."""
        async with self.client.pipeline(transaction=False) as pipe:
            for task_id, context_id in tasks:
                pipe.hget(keys.context(context_id).tasks, f"{task_id}:s")
            raw = await pipe.execute()
        return [
            None if status is None else orjson.loads(self._open(keys, cid, f"{tid}:s", status))
            for (tid, cid), status in zip(tasks, raw, strict=True)
        ]

    @_translated
    async def task_state(self, keys: UserKeys, context_id: str, task_id: str) -> str | None:
        raw = await self._read("HGET", keys.context(context_id).tasks, task_field(task_id, f.STATE))
        return _text(raw) if raw is not None else None

    @_translated
    async def run_settled(self, keys: UserKeys, context_id: str, task_id: str, seq: int) -> bool:
        """Whether a blocking send of the message at ``seq`` may return: the task is gone or
        terminal, or the message's run has settled (the task is interrupted, or has gone on to
        a later message). ``seq`` 0: whether the task is settled, whatever ran."""
        fields = [task_field(task_id, s) for s in (f.STATE, f.RAN, f.JOB)]
        state, ran, job = await self._read("HMGET", keys.context(context_id).tasks, *fields)
        if state is None or _text(state) in TERMINAL:
            return True
        if seq and int(ran or 0) < seq:
            return False
        return _text(state) in INTERRUPTED or (bool(seq) and job is not None)

    @_translated
    async def read_task(
        self, keys: UserKeys, context_id: str, task_id: str, history_length: int | None
    ) -> Task | None:
        """The task; ``history_length`` None means the whole history."""
        ck = keys.context(context_id)
        fields = [task_field(task_id, s) for s in (*_TASK_FIELDS, f.OPEN_ARTIFACT)]
        status, arts, seqs, metadata, extra, streamed = await self._read("HMGET", ck.tasks, *fields)
        if status is None:
            return None
        history: list[bytes] | None = None
        wanted = message_seqs(seqs, history_length)
        if wanted:
            # Messages may be large: their read keeps a pooled connection of its own.
            found = await self.client.hmget(ck.msgs, wanted)
            history = self._history(keys, context_id, wanted, found)
        elif history_length is None or history_length > 0:
            history = []
        stored = (status, arts, metadata, extra)
        return self._task(keys, context_id, task_id, stored, history, streamed)

    @_translated
    async def begin_run(
        self,
        keys: UserKeys,
        context_id: str,
        task_id: str,
        seq: int,
        reference_ids: Sequence[str],
        *,
        attempt: str = "",
        entry: str = "",
    ) -> RunInputs | None:
        """Start a run: its inputs, or None when the run is moot (task gone, terminal, or the
        message already ran; its job is then acknowledged). An ``attempt`` id fences the run
        and rolls back what an earlier, interrupted attempt wrote."""
        reply = await self.scripts.begin_run(
            keys=self._keys(keys, context_id),
            args=argv(BeginRunArgs(task_id, seq, attempt, entry, list(reference_ids))),
        )
        begun = begin_run_reply(reply)
        if begun.moot:
            if begun.lost is not None:  # a cluster: the run before settled, its job was lost
                lost_seq, lost_job = begun.lost
                await self._queue_job(keys, context_id, task_id, lost_job, lost_seq)
            await self._ack_job(entry)
            return None
        if begun.message is None:
            return None
        message = self.open_message(keys, context_id, begun.message)
        referenced = begun.referenced or []
        inputs = self._run_inputs(keys, context_id, reference_ids, seq, message, referenced)
        return replace(inputs, last=begun.last, waiting=begun.waiting)

    @_translated
    async def context_messages(
        self, keys: UserKeys, context_id: str, seqs: Sequence[int]
    ) -> list[RawJson]:
        """The messages at ``seqs`` (sequence numbers) of a context, in that order, as
        stored (A2A 0.3 JSON)."""
        if not seqs:
            return []
        raw = await self.client.hmget(keys.context(context_id).msgs, list(seqs))
        found = self._history(keys, context_id, seqs, raw, stand_ins=False)
        if len(found) < len([m for m in raw if m is not None]):
            log.warning("messages left out of a run's history: they do not decrypt here")
        return [RawJson(m) for m in found]

    def _subject(self, keys: UserKeys, context_id: str, raw: Any) -> str | None:
        opened = self._open(keys, context_id, f.META_SUBJECT, raw)
        return _text(opened) if opened else None

    def subject_token(self, keys: UserKeys, context_id: str, subject: str) -> str:
        """A context's subject as a job may carry it: sealed as in the context's meta."""
        aad = context_of(keys.prefix, context_id, f.META_SUBJECT)
        return self.sealer.seal_token(subject.encode(), aad).decode()

    def open_subject_token(self, keys: UserKeys, context_id: str, token: str) -> str:
        return _text(self._open(keys, context_id, f.META_SUBJECT, token.encode()))

    @_translated
    async def context_exists(self, keys: UserKeys, context_id: str) -> bool:
        """Whether the user has the context (not expired, not scrubbed)."""
        return bool(await self.client.exists(keys.meta(context_id)))

    @_translated
    async def context_subject(self, keys: UserKeys, context_id: str) -> str | None:
        """The subject the context is bound to (None: none, or no such context)."""
        raw = await self.client.hget(keys.context(context_id).meta, f.META_SUBJECT)
        return self._subject(keys, context_id, raw)

    @_translated
    async def list_contexts(
        self, keys: UserKeys, limit: int, offset: int
    ) -> tuple[list[ContextSummary], int]:
        """A page of the user's contexts, newest write first, and how many there are."""
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
                pipe.hmget(keys.meta(cid), ["created", "updated", "tasks"])
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
        self, keys: UserKeys, context_id: str, limit: int, offset: int
    ) -> ContextPage | None:
        """A page of the context's tasks (oldest first, whole histories); None: no such
        context."""
        ck = keys.context(context_id)
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.pttl(ck.meta)
            pipe.llen(ck.items)
            pipe.lrange(ck.items, offset, offset + limit - 1)
            pipe.hmget(ck.meta, ["embq", "embd", f.META_SUBJECT])
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
    async def prune_indexes(self) -> int:
        """Remove index entries (contexts, task and origin pointers) of expired contexts.
        Idempotent; returns how many entries went."""
        removed = 0
        async for key in self.client.scan_iter(match="gw:{*}:ctxs", count=500):
            prefix = _text(key)[: -len(":ctxs")]
            alive: dict[str, bool] = {}

            async def live(cid: str, prefix: str = prefix, alive: dict[str, bool] = alive) -> bool:
                if cid not in alive:
                    alive[cid] = bool(await self.client.exists(f"{prefix}:c:{cid}"))
                return alive[cid]

            dead = [_text(c) for c in await self.client.zrange(key, 0, -1)]
            dead = [c for c in dead if not await live(c)]
            if dead:
                removed += int(await self.client.zrem(key, *dead))
            for index in (f"{prefix}:tix", f"{prefix}:orig"):
                stale = [
                    f
                    async for f, cid in self.client.hscan_iter(index)
                    if not await live(_text(cid))
                ]
                if stale:
                    removed += int(await self.client.hdel(index, *stale))
        return removed
