"""Executes one run of an agent: inputs in, updates written, outcome stored.

Shared by every queue. A run stops at once when its task is canceled (on any
replica, through the task events), and whatever it would still write is refused
by the store, which takes no writes to terminal or scrubbed tasks, nor from an
attempt that no longer owns the run.

A task is marked ``working`` once its run has lasted ``working_after`` seconds
(or the agent reports progress); a run that finishes sooner goes from
``submitted`` straight to its outcome, which saves a write on every quick turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from gateway import metrics, tracing
from gateway.agents.base import (
    AgentRequest,
    AgentUpdate,
    ArtifactChunk,
    ArtifactUpdate,
    ContextSearch,
    MetadataUpdate,
    ReplyUpdate,
    StatusUpdate,
)
from gateway.agents.registry import AgentRegistry
from gateway.backoff import Backoff, RetryPolicy
from gateway.canonical import task_value
from gateway.engine.events import INTERRUPTED, NEXT, TaskEvent, TaskEvents
from gateway.engine.runs import RunJob
from gateway.engine.status import (
    agent_message,
    artifact_event,
    artifact_object,
    joined_parts,
    run_artifact_id,
    settled,
    status_json,
)
from gateway.errors import AgentNotFoundError, GatewayError, StoreUnavailableError
from gateway.longterm.recall import LongTermMemory, RecallFailed, subject_of
from gateway.longterm.wire import store_job
from gateway.principal import Principal
from gateway.store.redis_store import Store, TaskUpdate

__all__ = ["RunExecutor", "SearchFor", "retrying"]

T = TypeVar("T")

# (tenant, user, context id) -> the search over that context a run is given, or None.
SearchFor = Callable[[str, str, str], ContextSearch | None]

log = logging.getLogger("gateway.runs")

SHUTDOWN_TEXT = "The gateway stopped before the task finished."
FAILURE_TEXT = "The agent failed while processing the task."
MEMORY_TEXT = "Long-term memory is unavailable, and this agent requires it."
GONE_TEXT = "The agent was deleted before the task ran."


# A run's writes are retried through a Redis outage (for at most the job's lease: past it
# another worker may take the run over, and this one's writes are fenced off anyway).
STORE_RETRY = RetryPolicy(Backoff(0.05, 2.0), (StoreUnavailableError,))


def _retried(_: BaseException) -> None:
    log.warning("store unavailable; retrying the run's write")


async def retrying(call: Callable[[], Awaitable[T]], seconds: float) -> T:
    """``call()``, retried with backoff while the store is unavailable, for up to ``seconds``."""
    return await STORE_RETRY.call(call, within=seconds, on_retry=_retried)


class _Run:
    """Writes one run's updates, batching artifacts and replies with the next status."""

    def __init__(
        self,
        store: Store,
        events: TaskEvents,
        job: RunJob,
        retry_seconds: float = 0.0,
        on_next: Callable[[RunJob], None] | None = None,
    ) -> None:
        self.store, self.events, self.job = store, events, job
        self.retry_seconds, self.on_next = retry_seconds, on_next
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
        following = status_json("submitted") if finish else b""
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
            # The task goes on with the next waiting message: this run's waiters are done.
            event = TaskEvent(NEXT, job.seq, following, result.artifacts_json, metadata)
            self.events.notify_local(job.task_id, event)
        elif settled(state):
            event = TaskEvent(state, job.seq, status, result.artifacts_json, metadata)
            self.events.notify_local(job.task_id, event)
        if result.next_run is not None and self.on_next is not None:
            self.on_next(job.following(*result.next_run))

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


@dataclass(frozen=True)
class _StoredHistory:
    """The last ``window`` messages of the context a run sees, read on demand: those up to
    ``last`` bar the run's own (``seq``) and the later ones still waiting for the task."""

    store: Store
    principal: Principal
    context_id: str
    seq: int
    window: int
    last: int = 0
    waiting: frozenset[int] = frozenset()

    @property
    def _end(self) -> int:
        return max(self.last, self.seq - 1)

    @property
    def count(self) -> int:
        skipped = (1 if self.seq <= self._end else 0) + len(self.waiting)
        return max(0, min(self.window, self._end - skipped))

    def _seqs(self) -> list[int]:
        wanted: list[int] = []
        at = self._end
        while len(wanted) < self.count and at > 0:
            if at != self.seq and at not in self.waiting:
                wanted.append(at)
            at -= 1
        return wanted[::-1]

    async def load(self) -> Sequence[Mapping[str, Any]]:
        found = await self.store.context_messages(self.principal, self.context_id, self._seqs())
        return [m.value for m in found]  # the agent contract's JSON


class RunExecutor:
    def __init__(
        self,
        store: Store,
        agents: AgentRegistry,
        events: TaskEvents,
        *,
        context_window: int,
        working_after: float,
        longterm: LongTermMemory | None = None,
        search_for: SearchFor | None = None,
        retry_seconds: float = 0.0,
    ) -> None:
        """``search_for``: the context search a run's agent is given (injected by the
        composition root); ``retry_seconds``: how long a run's writes are retried through a
        store outage."""
        self._store, self._agents, self._events = store, agents, events
        self._longterm, self._search_for = longterm, search_for
        self._window, self._working_after = context_window, working_after
        self._retry_seconds = retry_seconds
        self._markers: set[asyncio.Task[None]] = set()
        self._running: dict[str, tuple[asyncio.Task[Any], _Run]] = {}
        self._task_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self.closing = False
        # Where the next waiting message's run goes when this process queues it itself (set
        # by the in-process queue; the durable queue's runs are queued by the store).
        self.on_next: Callable[[RunJob], None] | None = None
        events.add_listener(self._on_event)

    def _on_event(self, task_id: str, state: str, seq: int) -> None:
        """Stop a run here when its task is canceled, or a later message interrupted it."""
        running = self._running.get(task_id)
        if running is None:
            return
        if state == "canceled" or (state == INTERRUPTED and running[1].job.seq <= seq):
            running[1].stopped = "canceled" if state == "canceled" else "interrupted"
            running[0].cancel()

    def _run(self, job: RunJob) -> _Run:
        return _Run(self._store, self._events, job, self._retry_seconds, self.on_next)

    async def execute(self, job: RunJob) -> None:
        """Run the job; runs of one task in this process take turns."""
        lock, users = self._task_locks.get(job.task_id, (asyncio.Lock(), 0))
        self._task_locks[job.task_id] = (lock, users + 1)
        try:
            with tracing.run_span(job):
                async with lock:
                    await self._execute(job)
        finally:
            lock, users = self._task_locks[job.task_id]
            if users == 1:
                del self._task_locks[job.task_id]
            else:
                self._task_locks[job.task_id] = (lock, users - 1)

    async def _execute(self, job: RunJob) -> None:
        run = self._run(job)
        current = asyncio.current_task()
        assert current is not None
        self._running[job.task_id] = (current, run)
        started = time.perf_counter()
        outcome = ""  # how the run ended, where its last write does not say
        try:
            await self._drive(run)
            outcome = run.ended or run.state  # no final state: the task is left as it is
        except asyncio.CancelledError:
            if self.closing:
                outcome = "shutdown"
                await self._interrupted(run)
                raise
            outcome = run.stopped or "canceled"
            # Canceled by the client (the store holds `canceled`) or interrupted by a later
            # message (it counts as run): acknowledge the job.
            if current.cancelling():
                current.uncancel()
            with contextlib.suppress(GatewayError):
                await run.write("", finish=True)
        except StoreUnavailableError:
            outcome = "store-unavailable"
            log.error("store unavailable during run", extra={"task": job.task_id})
        except RecallFailed:
            with contextlib.suppress(GatewayError):
                await run.write("failed", MEMORY_TEXT, finish=True)
        except AgentNotFoundError:
            if not job.entry or job.registered:
                # In-memory jobs cannot move; a registered agent is gone for every worker.
                text = GONE_TEXT if job.registered else FAILURE_TEXT
                with contextlib.suppress(GatewayError):
                    await run.write("failed", text, finish=True)
            else:
                # A durable job stays pending: after the lease it goes back to the queue for a
                # worker that has this agent (or, after too many attempts, to the dead letters).
                outcome = "not-served"
                log.warning("agent not served by this worker", extra={"task": job.task_id})
        except Exception as exc:  # an agent bug must not kill the worker
            tracing.failed(exc)
            log.error("agent run failed", extra={"task": job.task_id, "error": type(exc).__name__})
            with contextlib.suppress(GatewayError):
                await run.write("failed", FAILURE_TEXT, finish=True)
        finally:
            self._running.pop(job.task_id, None)
            seconds = time.perf_counter() - started
            # A failure write that did not land leaves the outcome to the store's outage.
            kind = run.kind or self._agents.kind(job.agent_id)
            metrics.series(metrics.RUNS, kind, outcome or run.ended or "store-unavailable").inc()
            metrics.series(metrics.RUN_SECONDS, kind).observe(seconds)
            log.debug("run finished", extra={"task": job.task_id, "ms": round(seconds * 1e3, 2)})

    async def _interrupted(self, run: _Run) -> None:
        """Shutdown cut the run short. A durable job stays pending for another worker; an
        in-memory one cannot be resumed, so its task ends failed."""
        if run.job.entry or not run.open:
            return
        with contextlib.suppress(GatewayError):
            await asyncio.shield(run.write("failed", SHUTDOWN_TEXT, finish=True))

    async def fail(self, job: RunJob, text: str) -> None:
        """End a run that will never happen (shutdown, too many attempts) as failed."""
        run = self._run(job)
        with contextlib.suppress(GatewayError):
            await run.write("failed", text, finish=True)

    async def _drive(self, run: _Run) -> None:
        job = run.job
        inputs = job.inputs or await retrying(
            lambda: self._store.begin_run(
                run.principal,
                job.context_id,
                job.task_id,
                job.seq,
                job.reference_ids,
                attempt=job.attempt,
                entry=job.entry,
            ),
            self._retry_seconds,
        )
        if inputs is None:
            run.ended = "moot"
            return
        # After the run is ours: a missing agent's failure must not be fenced off.
        agent = await self._agents.resolve(job.tenant, job.agent_id)
        run.kind = self._agents.kind(job.agent_id, agent)
        history = _StoredHistory(
            self._store,
            run.principal,
            job.context_id,
            job.seq,
            self._window,
            inputs.last,
            inputs.waiting,
        )
        timer = asyncio.get_running_loop().call_later(self._working_after, self._mark, run)
        try:
            memory = None
            tools = None
            if self._longterm is not None:
                options = self._longterm.options_for(agent)
                if getattr(agent, "uses_recall", True):  # a proxy has no prompt to put them in
                    memory = await self._longterm.recall(
                        job.tenant, job.user, job.context_id, inputs.message, options
                    )
                if options.tools:
                    tools = self._longterm.tools(
                        job.tenant, job.user, job.context_id, subject_of(inputs.message), options
                    )
                if memory is not None and memory.ids:
                    run.add_metadata({"recalledMemoryIds": list(memory.ids)})
                    await self._longterm.shown(
                        job.tenant, job.user, job.context_id, job.task_id, memory.ids
                    )
                if options.store_turns:
                    run.outbox_job = store_job(
                        job.tenant,
                        job.user,
                        job.context_id,
                        job.task_id,
                        options,
                        self._subject_token(run, subject_of(inputs.message)),
                    )
            request = AgentRequest(
                task_id=job.task_id,
                context_id=job.context_id,
                message=inputs.message,
                history=history,
                referenced_tasks=[task_value(t) for t in inputs.referenced],
                recalled=memory.lines if memory else (),
                memory=memory,
                accepted_output_modes=job.output_modes,
                long_term=tools,
                search=(
                    self._search_for(job.tenant, job.user, job.context_id)
                    if self._search_for is not None
                    else None
                ),
            )
            with self._events.running_here(job.task_id):
                await self._consume(run, agent.run(request))
        finally:
            timer.cancel()

    def _subject_token(self, run: _Run, subject: str | None) -> str:
        """The subject as the outbox job carries it (sealed, as content is)."""
        if not subject:
            return ""
        return self._store.subject_token(run.principal, run.job.context_id, subject)

    def _mark(self, run: _Run) -> None:
        marker = asyncio.create_task(run.mark_working())
        self._markers.add(marker)
        marker.add_done_callback(self._markers.discard)

    async def _consume(self, run: _Run, updates: AsyncIterator[AgentUpdate]) -> None:
        try:
            await self._apply(run, updates)
        finally:
            # A run that stops early (canceled, interrupted, its write refused) closes the
            # agent's stream here, so the agent's clean-up (a remote cancel) is part of it.
            close = getattr(updates, "aclose", None)
            if close is not None:
                await close()

    async def _apply(self, run: _Run, updates: AsyncIterator[AgentUpdate]) -> None:
        job, final = run.job, "completed"
        async for update in updates:
            if isinstance(update, ArtifactUpdate):
                run.add_artifact(update)
            elif isinstance(update, ArtifactChunk):
                run.add_chunk(update)  # stored and sent to stream readers at once
                await run.write("")
                if not run.open:
                    return
            elif isinstance(update, ReplyUpdate):
                reply = agent_message(job.context_id, job.task_id, update.parts, update.metadata)
                run.reply = orjson.dumps(reply)
            elif isinstance(update, MetadataUpdate):
                run.add_metadata(update.metadata)
            elif isinstance(update, StatusUpdate):
                final = update.state
                await run.write(update.state, update.text, finish=settled(update.state))
                if not run.open:
                    return
        if run.streamed is not None:
            run.add_chunk(ArtifactChunk((), last=True))  # closed for stream readers too
        await run.write(final if run.pending else "", finish=True)
