"""The in-process runner: agent runs outside the request, with bounded concurrency.

It implements ``JobQueue``; a durable queue can take its place without the
services noticing. Runs of one task are serialised. A run stops at once when its
task is canceled (on any replica, through the task events) and its late results
are discarded by the store, which refuses writes to terminal or scrubbed tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import orjson

from gateway.agents.base import AgentRequest, ArtifactUpdate, ReplyUpdate, StatusUpdate
from gateway.agents.registry import AgentRegistry
from gateway.engine.events import TaskEvents
from gateway.engine.jobs import RunJob
from gateway.engine.status import agent_message, artifact, status_json
from gateway.errors import GatewayError, StoreUnavailableError
from gateway.store.keys import UserKeys
from gateway.store.redis_store import Store

__all__ = ["InProcessRunner"]

log = logging.getLogger("gateway.runner")

_SHUTDOWN_TEXT = "The gateway stopped before the task finished."
_FAILURE_TEXT = "The agent failed while processing the task."


class _Run:
    """Writes one run's updates, batching artifacts and replies with the next status."""

    def __init__(self, store: Store, job: RunJob) -> None:
        self.store, self.job = store, job
        self.keys = UserKeys.of(job.tenant, job.user)
        self.artifacts: list[bytes] = []
        self.reply: bytes | None = None
        self.open = True

    async def write(self, state: str, text: str | None = None) -> None:
        job = self.job
        outcome = await self.store.update_task(
            self.keys,
            job.context_id,
            job.task_id,
            state,
            status_json(state, job.context_id, job.task_id, text),
            self.artifacts,
            self.reply,
        )
        self.artifacts, self.reply = [], None
        self.open = outcome == "ok"


class InProcessRunner:
    def __init__(
        self,
        store: Store,
        agents: AgentRegistry,
        events: TaskEvents,
        *,
        concurrency: int,
        context_window: int,
    ) -> None:
        self._store, self._agents, self._events = store, agents, events
        self._concurrency, self._window = concurrency, context_window
        self._queue: asyncio.Queue[RunJob] = asyncio.Queue()
        self._workers: list[asyncio.Task[None]] = []
        self._running: dict[str, asyncio.Task[None]] = {}
        self._task_locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._closing = False
        events.add_listener(self._on_event)

    async def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(), name=f"runner-{i}") for i in range(self._concurrency)
        ]

    async def enqueue(self, job: RunJob) -> None:
        if self._closing:
            raise StoreUnavailableError("The gateway is shutting down; retry later")
        self._queue.put_nowait(job)

    async def stop(self, grace_seconds: float) -> None:
        self._closing = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), grace_seconds)
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        while not self._queue.empty():
            job = self._queue.get_nowait()
            self._queue.task_done()
            with contextlib.suppress(GatewayError):
                await _Run(self._store, job).write("failed", _SHUTDOWN_TEXT)

    def _on_event(self, task_id: str, state: str) -> None:
        if state == "canceled" and (running := self._running.get(task_id)) is not None:
            running.cancel()

    async def _work(self) -> None:
        while True:
            job = await self._queue.get()
            lock, users = self._task_locks.get(job.task_id, (asyncio.Lock(), 0))
            self._task_locks[job.task_id] = (lock, users + 1)
            try:
                async with lock:
                    await self._execute(job)
            finally:
                self._queue.task_done()
                lock, users = self._task_locks[job.task_id]
                if users == 1:
                    del self._task_locks[job.task_id]
                else:
                    self._task_locks[job.task_id] = (lock, users - 1)

    async def _execute(self, job: RunJob) -> None:
        run = _Run(self._store, job)
        current = asyncio.current_task()
        assert current is not None
        self._running[job.task_id] = current
        started = time.perf_counter()
        try:
            await self._drive(run)
        except asyncio.CancelledError:
            if self._closing and run.open:
                with contextlib.suppress(GatewayError):
                    await asyncio.shield(run.write("failed", _SHUTDOWN_TEXT))
                raise
            # Canceled by the client: the store already holds `canceled`.
            if current.cancelling():
                current.uncancel()
        except StoreUnavailableError:
            log.error("store unavailable during run", extra={"task": job.task_id})
        except Exception as exc:  # an agent bug must not kill the worker
            log.error("agent run failed", extra={"task": job.task_id, "error": type(exc).__name__})
            with contextlib.suppress(GatewayError):
                await run.write("failed", _FAILURE_TEXT)
        finally:
            self._running.pop(job.task_id, None)
            log.debug(
                "run finished",
                extra={"task": job.task_id, "ms": round((time.perf_counter() - started) * 1e3, 2)},
            )

    async def _drive(self, run: _Run) -> None:
        job = run.job
        agent = self._agents.get(job.agent_id)
        inputs = await self._store.run_inputs(
            run.keys, job.context_id, job.seq, self._window, job.reference_ids
        )
        if inputs is None:
            return
        await run.write("working")
        if not run.open:
            return
        request = AgentRequest(
            task_id=job.task_id,
            context_id=job.context_id,
            message=inputs.message,
            history=inputs.history,
            referenced_tasks=inputs.referenced,
        )
        final = "completed"
        async for update in agent.run(request):
            if isinstance(update, ArtifactUpdate):
                run.artifacts.append(artifact(update.parts, update.name))
            elif isinstance(update, ReplyUpdate):
                reply = agent_message(job.context_id, job.task_id, update.parts)
                run.reply = orjson.dumps(reply)
            elif isinstance(update, StatusUpdate):
                final = update.state
                await run.write(update.state, update.text)
                if not run.open:
                    return
        if run.artifacts or run.reply is not None:
            await run.write(final)
