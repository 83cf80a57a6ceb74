"""A run's writes: its start (``RunOps.begin_run``), its progress and end
(``RunOps.update_task``, with ``TaskUpdate``), and a task canceled (``cancel_task``).
Content, artifact events and the open artifact included, is sealed on its way in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import orjson

from gateway.clock import now_ms
from gateway.principal import Principal
from gateway.store import fields as f
from gateway.store.fields import task_field
from gateway.store.keys import OUTBOX, keys_of
from gateway.store.lua.context import CancelArgs, cancel_reply
from gateway.store.lua.run import BeginRunArgs, begin_run_reply
from gateway.store.lua.update import UpdateArgs, update_reply
from gateway.store.sealing import context_of
from gateway.store.store_base import RunInputs
from gateway.store.store_cluster import ClusterSteps
from gateway.store.translate import translated as _translated

__all__ = ["RunOps", "TaskUpdate", "UpdateResult"]


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
    ``open_artifact`` is the artifact being streamed as it stands (``b"-"``: closed)."""

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


@dataclass(frozen=True)
class UpdateResult:
    outcome: Literal["ok", "gone", "terminal", "skipped", "fenced", "moot"]
    # The task's artifacts, given with a write that finishes the run or settles the task.
    artifacts_json: bytes | None = None
    chained: bool = False  # the run settled while messages waited: the next one is queued
    # The next waiting message's run (its seq and job fields) when the caller queues it
    # itself (the in-process queue).
    next_run: tuple[int, bytes] | None = None


def _artifact_ids(artifacts: Sequence[bytes]) -> bytes:
    """The artifactIds of artifacts (JSON), one per line: what an artifact update names."""
    ids = (str(orjson.loads(a).get("artifactId") or "") for a in artifacts)
    return "\n".join(i.replace("\n", " ") for i in ids).encode()


class RunOps(ClusterSteps):
    """The store's writes of runs and cancels."""

    @_translated
    async def begin_run(
        self,
        principal: Principal,
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
        keys = keys_of(principal)
        reply = await self.scripts.begin_run(
            keys=self._keys(keys, context_id),
            args=BeginRunArgs(task_id, seq, attempt, entry, list(reference_ids)).argv(),
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
    async def update_task(self, principal: Principal, u: TaskUpdate) -> UpdateResult:
        """Record a run's progress (see ``TaskUpdate``). Refused for terminal or scrubbed
        tasks. Content, artifact events and the open artifact included, is sealed."""
        keys = keys_of(principal)
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
                artifact_ids=_artifact_ids(artifacts) if self.push_artifacts and artifacts else b"",
            ).argv(),
        )
        written = update_reply(reply)
        if written.outcome != "ok":
            if (finish and written.outcome != "fenced") or written.outcome == "gone":
                await self._ack_job(entry)
            return UpdateResult(written.outcome)  # type: ignore[arg-type]
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
        return UpdateResult("ok", artifacts_json, written.chained, next_run)

    @_translated
    async def cancel_task(
        self, principal: Principal, context_id: str, task_id: str, status_json: bytes
    ) -> tuple[str, str | None]:
        keys = keys_of(principal)
        reply = await self.scripts.cancel(
            keys=self._keys(keys, context_id),
            args=CancelArgs(
                cid=context_id,
                tid=task_id,
                status=self._seal(keys, context_id, task_field(task_id, f.STATUS), status_json),
                now=now_ms(),
                ttl=self.ttl_ms,
            ).argv(),
        )
        canceled = cancel_reply(reply)
        await self._moved_pushes(keys, context_id, canceled.pushed)
        return canceled.outcome, canceled.state
