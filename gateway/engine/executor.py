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
from collections.abc import AsyncIterator, Callable
from typing import Any

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
from gateway.canonical import task_value
from gateway.engine.events import INTERRUPTED, TaskEvents
from gateway.engine.next_run import NextRuns
from gateway.engine.run_history import StoredHistory
from gateway.engine.run_writer import RunWriter
from gateway.engine.runs import RunJob
from gateway.engine.status import agent_message, settled
from gateway.engine.write_retry import retrying
from gateway.errors import AgentNotFoundError, GatewayError, StoreUnavailableError
from gateway.longterm.recall import LongTermMemory, RecallFailed, subject_of
from gateway.longterm.wire import store_job
from gateway.store.redis_store import Store

__all__ = ["SHUTDOWN_TEXT", "RunExecutor", "SearchFor"]

# (tenant, user, context id) -> the search over that context a run is given, or None.
SearchFor = Callable[[str, str, str], ContextSearch | None]

log = logging.getLogger("gateway.runs")

SHUTDOWN_TEXT = "The gateway stopped before the task finished."
FAILURE_TEXT = "The agent failed while processing the task."
MEMORY_TEXT = "Long-term memory is unavailable, and this agent requires it."
GONE_TEXT = "The agent was deleted before the task ran."


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
        self._running: dict[str, tuple[asyncio.Task[Any], RunWriter]] = {}
        self._task_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self.closing = False
        # What follows a run that ends while messages wait for its task (the in-process
        # queue sets where the next run goes).
        self.next_runs = NextRuns(events)
        events.add_listener(self._on_event)

    def _on_event(self, task_id: str, state: str, seq: int) -> None:
        """Stop a run here when its task is canceled, or a later message interrupted it."""
        running = self._running.get(task_id)
        if running is None:
            return
        if state == "canceled" or (state == INTERRUPTED and running[1].job.seq <= seq):
            running[1].stopped = "canceled" if state == "canceled" else "interrupted"
            running[0].cancel()

    def _run(self, job: RunJob) -> RunWriter:
        return RunWriter(self._store, self._events, self.next_runs, job, self._retry_seconds)

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

    async def _interrupted(self, run: RunWriter) -> None:
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

    async def _drive(self, run: RunWriter) -> None:
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
        history = StoredHistory(
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

    def _subject_token(self, run: RunWriter, subject: str | None) -> str:
        """The subject as the outbox job carries it (sealed, as content is)."""
        if not subject:
            return ""
        return self._store.subject_token(run.principal, run.job.context_id, subject)

    def _mark(self, run: RunWriter) -> None:
        marker = asyncio.create_task(run.mark_working())
        self._markers.add(marker)
        marker.add_done_callback(self._markers.discard)

    async def _consume(self, run: RunWriter, updates: AsyncIterator[AgentUpdate]) -> None:
        try:
            await self._apply(run, updates)
        finally:
            # A run that stops early (canceled, interrupted, its write refused) closes the
            # agent's stream here, so the agent's clean-up (a remote cancel) is part of it.
            close = getattr(updates, "aclose", None)
            if close is not None:
                await close()

    async def _apply(self, run: RunWriter, updates: AsyncIterator[AgentUpdate]) -> None:
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
