"""An agent that forwards to a remote A2A agent, found by its card URL, through the
official ``a2a-sdk`` client (JSON-RPC or HTTP+JSON, as the card prefers).

Ids: the remote context and task ids are recorded on each agent message and in the
task's metadata (``remote``); a later turn of the same gateway context continues the
remote context, and a continued gateway task continues its remote task when that asked
for input. A remote task that is still running is polled until it settles; a cancel
of the gateway task is forwarded. Remote failures end the task ``failed`` with the
remote's own status text (text parts only, bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from gateway.agents.base import (
    AgentRequest,
    AgentUpdate,
    ArtifactUpdate,
    MetadataUpdate,
    ReplyUpdate,
    StatusUpdate,
)
from gateway.agents.registered import RegisteredAgent
from gateway.agents.specs import AgentEntry, RemoteConfig
from gateway.outbound import Allowlist, OutboundRefused

__all__ = ["RemoteAgent"]

log = logging.getLogger("gateway.agents")

UNREACHABLE_TEXT = "The remote agent could not be reached."
NOT_ALLOWED_TEXT = "The remote agent is not allowed by the gateway's outbound allowlist."
TIMEOUT_TEXT = "The remote agent did not finish in time."
REMOTE_FAILED_TEXT = "The remote agent failed."
_SETTLED = {"completed", "failed", "canceled", "rejected", "input-required", "auth-required"}
_MAX_ERROR_CHARS = 500
# How long a forwarded cancel (and learning the id of a task the remote is still answering
# for) may take before the run gives up on it.
CANCEL_SECONDS = 5.0

# Resolved cards, per card URL: (fetched at, card).
_CARDS: dict[str, tuple[float, Any]] = {}


def _text_of(message: Mapping[str, Any] | None) -> str:
    if not message:
        return ""
    return "\n".join(
        p.get("text", "") for p in message.get("parts") or () if p.get("kind") == "text"
    )


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


class RemoteAgent(RegisteredAgent):
    # The remote agent builds its own prompt: recalled memories could not reach it. Its
    # turns are still stored in long-term memory.
    uses_recall = False

    def __init__(
        self, entry: AgentEntry, config: RemoteConfig, allowlist: Allowlist, http: httpx.AsyncClient
    ) -> None:
        super().__init__(entry)
        self._config, self._allowlist, self._http = config, allowlist, http

    def _headers(self) -> dict[str, str]:
        key = self._config.key()
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _card(self) -> Any:
        from a2a.client import A2ACardResolver

        url = self._config.cardUrl
        cached = _CARDS.get(url)
        if cached is not None and time.monotonic() - cached[0] < self._config.cardTtlSeconds:
            return cached[1]
        parts = urlsplit(url)
        resolver = A2ACardResolver(self._http, f"{parts.scheme}://{parts.netloc}", parts.path)
        card = await resolver.get_agent_card(http_kwargs={"headers": self._headers()})
        _CARDS[url] = (time.monotonic(), card)
        return card

    async def _client(self) -> Any:
        from a2a.client import ClientConfig, ClientFactory
        from a2a.types import TransportProtocol

        card = await self._card()
        for interface in [card, *(card.additional_interfaces or ())]:
            await self._allowlist.check(interface.url)  # the card names where to send
        config = ClientConfig(
            streaming=False,
            polling=not self._config.blocking,
            httpx_client=self._http,
            supported_transports=[TransportProtocol.jsonrpc, TransportProtocol.http_json],
        )
        return ClientFactory(config).create(card)

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        from a2a.client import A2AClientError
        from a2a.types import Message

        try:
            await self._allowlist.check(self._config.cardUrl)
            client = await self._client()
        except OutboundRefused:
            yield StatusUpdate("failed", NOT_ALLOWED_TEXT)
            return
        except (A2AClientError, httpx.HTTPError, ValueError) as exc:
            log.warning(
                "remote card unavailable", extra={"agent": self.id, "error": type(exc).__name__}
            )
            yield StatusUpdate("failed", UNREACHABLE_TEXT)
            return
        remote_context, remote_task = await _remote_ids(request)
        outgoing = Message.model_validate(
            {
                "kind": "message",
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": list(request.message.get("parts") or ()),
                "contextId": remote_context,
                "taskId": remote_task,
            }
        )
        async for update in self._exchange(client, outgoing):
            yield update

    async def _exchange(self, client: Any, outgoing: Any) -> AsyncIterator[AgentUpdate]:
        """Send, poll until the remote task settles, mirror it; forward a cancel."""
        from a2a.client import A2AClientError, ClientCallContext
        from a2a.types import TaskIdParams

        call = ClientCallContext(state={"http_kwargs": {"headers": self._headers()}})
        sent: list[Any] = []  # the remote task, once known (for a cancel)
        try:
            async with asyncio.timeout(self._config.timeoutSeconds):
                async for update in _settled(client, outgoing, call, self._config, sent):
                    yield update
        except (asyncio.CancelledError, TimeoutError, GeneratorExit) as exc:
            # Stopped before the remote task settled: canceled, out of time, or closed by a
            # run that ended while an update was being written. The remote task stops too.
            if sent:
                await _forward_cancel(client, TaskIdParams(id=sent[-1]), call)
            if not isinstance(exc, TimeoutError):
                raise
            yield StatusUpdate("failed", TIMEOUT_TEXT)
        except (A2AClientError, httpx.HTTPError) as exc:
            log.warning("remote call failed", extra={"agent": self.id, "error": type(exc).__name__})
            yield StatusUpdate("failed", UNREACHABLE_TEXT)


async def _settled(
    client: Any, outgoing: Any, call: Any, config: RemoteConfig, sent: list[Any]
) -> AsyncIterator[AgentUpdate]:
    """Send the message, poll the remote task until it settles, and mirror the outcome."""
    from a2a.types import Message, TaskQueryParams

    sending = asyncio.ensure_future(_send(client, outgoing, call))
    try:
        task = await asyncio.shield(sending)
    except asyncio.CancelledError:
        # Canceled while the send is in flight: the remote may have started a task already.
        # Learn its id (within the cancel's bound) so that the cancel is forwarded to it.
        with contextlib.suppress(Exception):
            late = await asyncio.wait_for(sending, CANCEL_SECONDS)
            if late is not None and not isinstance(late, Message):
                sent.append(late.id)
        raise
    if isinstance(task, Message):
        for update in _answered(_dump(task)):
            yield update
        return
    sent.append(task.id)
    if task.status.state.value not in _SETTLED:
        yield StatusUpdate("working", "The remote agent is working.")
    while task.status.state.value not in _SETTLED:
        await asyncio.sleep(config.pollIntervalSeconds)
        task = await client.get_task(TaskQueryParams(id=task.id), context=call)
    sent.clear()  # settled: nothing left to cancel
    for update in _settle(_dump(task)):
        yield update


async def _send(client: Any, outgoing: Any, call: Any) -> Any:
    """The remote's answer to a send: its task (or a message), the last event it gave."""
    task: Any = None
    async for event in client.send_message(outgoing, context=call):
        task = event[0] if isinstance(event, tuple) else event
    return task


def _answered(reply: dict[str, Any]) -> list[AgentUpdate]:
    """A remote that answered with a message, not a task."""
    ids = {"contextId": reply.get("contextId"), "taskId": None, "state": "completed"}
    return [
        MetadataUpdate({"remote": ids}),
        ReplyUpdate(reply.get("parts") or [], metadata={"remote": ids}),
        StatusUpdate("completed"),
    ]


async def _forward_cancel(client: Any, params: Any, call: Any) -> None:
    cancel = asyncio.wait_for(client.cancel_task(params, context=call), CANCEL_SECONDS)
    with contextlib.suppress(Exception):
        await asyncio.shield(cancel)


async def _remote_ids(request: AgentRequest) -> tuple[str | None, str | None]:
    """The remote context of this gateway context, and the remote task to continue when
    this gateway task was waiting for input (from the ids on earlier agent messages)."""
    if not request.history.count:
        return None, None
    for message in reversed(await request.history.load()):
        remote = (message.get("metadata") or {}).get("remote")
        if message.get("role") != "agent" or not isinstance(remote, dict):
            continue
        same_task = message.get("taskId") == request.task_id
        waiting = remote.get("state") == "input-required"
        return remote.get("contextId"), remote.get("taskId") if same_task and waiting else None
    return None, None


def _settle(task: dict[str, Any]) -> list[AgentUpdate]:
    """The updates that mirror a settled remote task."""
    status = task.get("status") or {}
    state = status.get("state", "failed")
    ids = {"contextId": task.get("contextId"), "taskId": task.get("id"), "state": state}
    updates: list[AgentUpdate] = [MetadataUpdate({"remote": ids})]
    for artifact in task.get("artifacts") or ():
        updates.append(ArtifactUpdate(artifact.get("parts") or [], name=artifact.get("name")))
    message = status.get("message")
    if state in ("failed", "rejected", "auth-required"):
        text = _text_of(message)[:_MAX_ERROR_CHARS] or REMOTE_FAILED_TEXT
        updates.append(StatusUpdate("failed", text))
        return updates
    updates.append(ReplyUpdate(_reply_parts(task, message), metadata={"remote": ids}))
    updates.append(StatusUpdate(state))
    return updates


def _reply_parts(task: dict[str, Any], message: dict[str, Any] | None) -> list[Any]:
    """The agent message of the turn: the remote's status message, else its last agent
    message, else its artifacts' parts (the message also carries the remote ids)."""
    if message and message.get("parts"):
        return list(message["parts"])
    for earlier in reversed(task.get("history") or ()):
        if earlier.get("role") == "agent" and earlier.get("parts"):
            return list(earlier["parts"])
    parts = [p for a in task.get("artifacts") or () for p in a.get("parts") or ()]
    return parts or [{"kind": "text", "text": "The remote agent finished."}]
