"""message:send — accept a user message, run the agent outside the request, maybe wait."""

from __future__ import annotations

import asyncio
import hashlib
import re
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway import metrics, tracing
from gateway.a2a import accepts_any
from gateway.agents.base import Agent
from gateway.agents.registry import AgentRegistry
from gateway.context_memory.text import embeddable_text
from gateway.engine.events import Mailbox, TaskEvent, TaskEvents
from gateway.engine.hand_off import RunHandOff, SendResult
from gateway.engine.runs import RunJob
from gateway.engine.status import status_json
from gateway.errors import (
    ContentTypeNotSupportedError,
    ContextNotFoundError,
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
)
from gateway.ids import new_id
from gateway.longterm.recall import LongTermMemory
from gateway.models import SendMessageRequest, Task
from gateway.principal import Principal
from gateway.push.configs import Version
from gateway.service.push import PushService
from gateway.service.waiting import wait_until_settled
from gateway.store.assembly import assemble_task
from gateway.store.longterm_store import TurnRef
from gateway.store.redis_store import SendWrite, Store

__all__ = ["MessageService"]

# The outcomes whose turn goes to long-term memory.
_STORED_STATES = frozenset({"completed", "input-required"})

_SUBMITTED = metrics.TASK_TRANSITIONS.labels("submitted")


def message_digest(body: dict[str, Any]) -> str:
    """A fingerprint of what the client sent (bar its contextId), to tell a retry from a
    reused messageId."""
    fields = {k: v for k, v in body.items() if k != "contextId"}
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)).hexdigest()[:32]


MAX_SUBJECT = 200


def named_subject(metadata: dict[str, Any] | None) -> str | None:
    """The subject a message names in ``metadata.subject`` (None: none), validated."""
    if not metadata or "subject" not in metadata:
        return None
    subject = metadata["subject"]
    if not isinstance(subject, str) or not 1 <= len(subject) <= MAX_SUBJECT:
        raise InvalidParamsError(
            "metadata.subject must be a string of 1 to 200 characters",
            data={"errors": [{"field": "message.metadata.subject", "reason": "invalid"}]},
        )
    return subject


# A context id a client names: 1 to 128 of letters, digits and ``._-``, starting with a
# letter or digit. Room for UUIDs, ULIDs and prefixed ids (``app.session-42``); nothing that
# needs escaping in a URL path, a Redis key or a log line, no look-alike Unicode, no path
# segment ``.``/``..``, and no ``:``, which separates a context's keys (``<cid>:items``).
_CONTEXT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_context_id(context_id: str) -> None:
    """Refuse a client-named context id outside ``_CONTEXT_ID``."""
    if _CONTEXT_ID.fullmatch(context_id) is None:
        raise InvalidParamsError(
            "message.contextId must be 1 to 128 of A-Z a-z 0-9 . _ -, starting with a letter "
            "or digit",
            data={"errors": [{"field": "message.contextId", "reason": "invalid"}]},
        )


@dataclass
class MessageService:
    store: Store
    agents: AgentRegistry
    runs: RunHandOff
    events: TaskEvents
    blocking_timeout: float
    embedding: bool = False
    # messages, bytes per context; contexts, running tasks per user (0: none)
    quotas: tuple[int, int, int, int] = (0, 0, 0, 0)
    push: PushService | None = None  # None: sends with a push config are refused
    # Long-term memory, when on: a blocking send may wait for its turn to be stored.
    longterm: LongTermMemory | None = None
    # A send naming a context the user does not have opens it (else: 404, as for any
    # unknown context).
    client_context_ids: bool = True

    async def send(
        self,
        principal: Principal,
        agent: Agent,
        request: SendMessageRequest,
        push_version: Version = "0.3",
    ) -> Task:
        """Accept a message for ``agent`` (resolved by the caller for this request)."""
        config = request.configuration
        if config.pushNotificationConfig is not None and self.push is None:
            raise PushNotificationNotSupportedError()
        if not accepts_any(agent.output_modes, config.acceptedOutputModes):
            raise ContentTypeNotSupportedError(data={"supportedOutputModes": agent.output_modes})
        history_length = config.historyLength or 0
        policy = self.runs.policy(agent, request.message.metadata)
        registered = self.agents.builtin(agent.id) is None
        write, job = await self._prepare(principal, agent.id, request, registered)
        if config.pushNotificationConfig is not None and self.push is not None:
            push = await self.push.for_send(
                principal, write.task_id, config.pushNotificationConfig, push_version
            )
            write = replace(write, push_config_json=push)
        # Watch before writing: a run here may be done before send() returns.
        with self.events.watch(write.task_id) as events:
            result = await self.runs.send(principal, write, job, policy)
            tracing.sent(agent.id, result)
            if not result.duplicate and not result.waiting:  # a task opened or reopened
                _SUBMITTED.inc()
            event = await self._outcome(principal, result, events, config.blocking)
        if event is not None and event.state in _STORED_STATES:
            await self._await_persist(principal, agent, result)
        if event is not None and event.status_json is not None and history_length == 0:
            metadata = orjson.dumps(request.metadata) if request.metadata else None
            return assemble_task(
                result.task_id,
                result.context_id,
                event.status_json,
                event.artifacts_json,
                None,
                metadata,
                event.metadata_json,
            )
        task = await self.store.read_task(
            principal, result.context_id, result.task_id, history_length
        )
        if task is None:
            raise ContextNotFoundError()
        return task

    async def _await_persist(self, principal: Principal, agent: Agent, result: SendResult) -> None:
        """With the agent's ``memory.awaitPersist``, wait until Cortadel has stored the
        turn, for at most ``GATEWAY_CORTADEL_TIMEOUT_SECONDS`` (then the send returns as it
        would have: the outbox keeps the turn)."""
        if self.longterm is None:
            return
        options = self.longterm.options_for(agent)
        if not (options.await_persist and options.store_turns):
            return
        ref = TurnRef(principal, result.context_id, result.task_id, result.seq)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.longterm.cortadel.settings.timeout_seconds
        pause = 0.01
        while not await self.longterm.store.stored(ref):
            left = deadline - loop.time()
            if left <= 0:
                tracing.annotate({"gateway.persist.timeout": True})
                return
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 0.25)

    async def _outcome(
        self,
        principal: Principal,
        result: SendResult,
        events: Mailbox,
        blocking: bool,
    ) -> TaskEvent | None:
        """For a blocking send, wait for the task to settle (the event, when one came). A
        run in this process tells ``events`` itself; one elsewhere (another worker's, or
        one that waits for the task's run under way) is followed through Redis."""
        if not blocking:
            return None
        cid, tid, seq = result.context_id, result.task_id, result.seq
        if result.here:
            return await wait_until_settled(
                self.store, principal, cid, tid, events, self.blocking_timeout, seq
            )
        async with self.events.follow(tid):
            if await self.store.run_settled(principal, cid, tid, seq):
                return None
            event = await wait_until_settled(
                self.store, principal, cid, tid, events, self.blocking_timeout, seq
            )
        return None if result.duplicate else event  # a replay reads the task as it is

    async def _prepare(
        self,
        principal: Principal,
        agent_id: str,
        request: SendMessageRequest,
        registered: bool,
    ) -> tuple[SendWrite, RunJob]:
        """The send's write (how its run is queued is the hand-off's to say), and its run as
        a job (ids as the write names them; the store's answer fixes the ids and the
        message's seq)."""
        message = request.message
        context_id, task_id = message.contextId, message.taskId
        if task_id is not None and context_id is None:
            context_id = await self.store.task_context(principal, task_id)
            if context_id is None:
                raise TaskNotFoundError()
        new_context = context_id is None
        # A message naming a context without a task may open it, under the id it names.
        named = self.client_context_ids and context_id is not None and task_id is None
        if named and context_id is not None:
            check_context_id(context_id)
        context_id = context_id or new_id()
        continuing = task_id is not None
        task_id = task_id or new_id()
        stored = message.model_dump(mode="json", exclude_none=True)
        digest = message_digest(stored)
        stored["contextId"], stored["taskId"] = context_id, task_id
        subject = await self._subject(principal, context_id, new_context, named, stored)
        references = tuple(message.referenceTaskIds or ())
        text = embeddable_text(stored) if self.embedding else ""
        template = RunJob(
            principal.tenant,
            principal.user,
            agent_id,
            context_id,
            task_id,
            0,
            references,
            tuple(request.configuration.acceptedOutputModes or ()),
            registered,
            trace=tracing.traceparent(),
        )
        write = SendWrite(
            context_id=context_id,
            task_id=task_id,
            continuing=continuing,
            new_context=new_context,
            named=named,
            message_id=message.messageId,
            digest=digest,
            message_json=orjson.dumps(stored),
            metadata_json=orjson.dumps(request.metadata) if request.metadata else b"",
            status_json=status_json("submitted"),
            reference_ids=references,
            job_json=template.wire(),
            embed=bool(text),
            embed_text=text,
            quotas=self.quotas,
            subject=subject if new_context or named else "",
        )
        return write, template

    async def _subject(
        self,
        principal: Principal,
        context_id: str,
        new_context: bool,
        may_open: bool,
        stored: dict[str, Any],
    ) -> str:
        """The subject of the message's context: the one it names when it opens the context
        (it binds it), else the one the context is bound to, which it may repeat but not
        change, and which its metadata then carries (a subject never changes once bound,
        so reading it ahead of the write is sound). With ``may_open``, a context the user
        does not have is opened by this message."""
        named = named_subject(stored.get("metadata"))
        if new_context:
            return named or ""
        bound = await self.store.context_subject(principal, context_id)
        if (
            bound is None
            and may_open
            and not await self.store.context_exists(principal, context_id)
        ):
            return named or ""
        if named is not None and named != bound:
            reason = "differs from" if bound else "cannot be bound to"
            raise InvalidParamsError(
                f"metadata.subject {reason} the context's subject; a context is bound to one "
                "subject by its first message",
                data={"errors": [{"field": "message.metadata.subject", "reason": "mismatch"}]},
            )
        if bound:
            stored["metadata"] = {**(stored.get("metadata") or {}), "subject": bound}
        return bound or ""
