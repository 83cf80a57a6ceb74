"""One run's writes to its task (``RunWriter``): the agent's updates batched (artifacts,
streamed chunks, replies, metadata) and written with the next status, each write fenced by
the run's attempt and retried through a store outage; a finishing write ends the run."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import orjson

from gateway import metrics, tracing
from gateway.agents.base import ArtifactChunk, ArtifactUpdate
from gateway.engine.events import TaskEvent, TaskEvents
from gateway.engine.next_run import NextRuns
from gateway.engine.runs import RunJob
from gateway.engine.status import (
    artifact_event,
    artifact_object,
    joined_parts,
    run_artifact_id,
    settled,
    status_json,
)
from gateway.engine.write_retry import retrying
from gateway.errors import GatewayError
from gateway.principal import Principal
from gateway.store.redis_store import Store, TaskUpdate

__all__ = ["RunWriter"]


class RunWriter:
    """Writes one run's updates, batching artifacts and replies with the next status."""

    def __init__(
        self,
        store: Store,
        events: TaskEvents,
        next_runs: NextRuns,
        job: RunJob,
        retry_seconds: float = 0.0,
    ) -> None:
        self.store, self.events, self.next_runs, self.job = store, events, next_runs, job
        self.retry_seconds = retry_seconds
        self.principal = Principal(job.tenant, job.user)
        self.artifacts: list[bytes] = []
        self.artifact_events: list[bytes] = []  # for the task's event stream
        self.begun = 0  # artifacts this run has begun (their ids are run_artifact_id's)
        self.streamed: dict[str, Any] | None = None  # the artifact being streamed
        self.streamed_change = b""  # how the stored open artifact changes with the next write
        self.reply: bytes | None = None
        self.open = True
        self.finishing = False  # the run's last write has begun
        self.outbox_job = b""  # set when the finished turn goes to long-term memory
        self.metadata: dict[str, Any] = {}  # what the agent reported for the task's metadata
        self.metadata_pending = False  # reported since the last write
        self.state = "submitted"  # the task's state as this run last wrote it
        self.ended = ""  # the state the run ended with, "refused", or "moot" (for metrics)
        self.stopped = ""  # "canceled" or "interrupted" when an event stopped the run
        self.kind = ""  # the agent's type (for metrics), once resolved

    async def write(self, state: str, text: str | None = None, *, finish: bool = False) -> None:
        """Store an update; ``finish`` also records the run as done and acknowledges its job.
        ``state`` "" changes no status."""
        job = self.job
        status = status_json(state, job.context_id, job.task_id, text) if state else b""
        if finish:
            self.finishing = True
            self._close_streamed()
        metadata = orjson.dumps(self.metadata) if self.metadata else None
        following = self.next_runs.status() if finish else b""
        update = TaskUpdate(
            job.context_id,
            job.task_id,
            state,
            status,
            self.artifacts,
            self.reply,
            attempt=job.attempt,
            seq=job.seq,
            finish=finish,
            entry=job.entry,
            outbox_job=self.outbox_job if finish else b"",
            metadata_json=metadata if metadata and self.metadata_pending else b"",
            queued_locally=job.local,
            next_status_json=following,
            artifact_events=self.artifact_events,
            open_artifact=self.streamed_change,
        )
        result = await retrying(
            lambda: self.store.update_task(self.principal, update),
            self.retry_seconds,
        )
        if finish:
            tracing.annotate({"gateway.task.state": state, "gateway.run.write": result.outcome})
        self.artifacts, self.reply, self.metadata_pending = [], None, False
        self.artifact_events, self.streamed_change = [], b""
        self.open = result.outcome == "ok" and not finish
        if result.outcome != "ok":
            self.ended = "refused"
            return
        self._entered("submitted" if result.chained else state)
        if finish and state:
            self.ended = state
        if result.chained:
            self.next_runs.chained(job, result, following, metadata)
        elif settled(state):
            event = TaskEvent(state, job.seq, status, result.artifacts_json, metadata)
            self.events.notify_local(job.task_id, event)

    def _entered(self, state: str) -> None:
        """Count a change of the task's state written by this run."""
        if state and state != self.state:
            self.state = state
            metrics.series(metrics.TASK_TRANSITIONS, state).inc()

    @property
    def pending(self) -> bool:
        """Whether something is waiting for the next write."""
        return bool(
            self.artifacts
            or self.artifact_events
            or self.reply is not None
            or self.metadata_pending
            or self.streamed_change
        )

    def _next_artifact_id(self) -> str:
        self.begun += 1
        return run_artifact_id(self.job.task_id, self.job.seq, self.begun)

    def add_artifact(self, update: ArtifactUpdate) -> None:
        body = artifact_object(update.parts, update.name, self._next_artifact_id())
        self.artifacts.append(orjson.dumps(body))
        self.artifact_events.append(artifact_event(body, append=False, last_chunk=True))

    def add_chunk(self, chunk: ArtifactChunk) -> None:
        append = chunk.append and self.streamed is not None
        if not append:
            self._close_streamed()
            self.streamed = artifact_object([], chunk.name, self._next_artifact_id())
        streamed = self.streamed
        assert streamed is not None
        streamed["parts"] = joined_parts(streamed["parts"], chunk.parts)
        piece = artifact_object(chunk.parts, streamed.get("name"), streamed["artifactId"])
        self.artifact_events.append(artifact_event(piece, append=append, last_chunk=chunk.last))
        if chunk.last:
            self._close_streamed()
        else:
            self.streamed_change = orjson.dumps(streamed)

    def _close_streamed(self) -> None:
        """Store the artifact being streamed as it stands, with the next write."""
        if self.streamed is not None:
            self.artifacts.append(orjson.dumps(self.streamed))
            self.streamed, self.streamed_change = None, b"-"

    def add_metadata(self, metadata: Mapping[str, Any]) -> None:
        self.metadata.update(metadata)
        self.metadata_pending = True

    async def mark_working(self) -> None:
        """Record that the run is under way, unless it has already moved on (or is writing
        its outcome: the mark would be refused or overwritten at once)."""
        if self.finishing:
            return
        job = self.job
        with contextlib.suppress(GatewayError):
            working = TaskUpdate(
                job.context_id,
                job.task_id,
                "working",
                status_json("working"),
                required_state="submitted",
                attempt=job.attempt,
                seq=job.seq,
            )
            result = await self.store.update_task(self.principal, working)
            if result.outcome == "ok":
                self._entered("working")
