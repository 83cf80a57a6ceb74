"""An agent that forwards to a remote A2A agent, found by its card URL. The card decides
the protocol: an agent offering A2A 1.0 interfaces (``supportedInterfaces``) is spoken to
in 1.0 (``gateway.agents.remote_v1``, JSON-RPC first), any other through the official
``a2a-sdk`` 0.3 client (JSON-RPC or HTTP+JSON, as the card prefers).

Ids: the remote context and task ids are recorded on each agent message and in the
task's metadata (``remote``); a later turn of the same gateway context continues the
remote context, and a continued gateway task continues its remote task when that asked
for input. A remote task that is still running is polled until it settles; a cancel
of the gateway task is forwarded. A blocking send to a remote (0.3 or 1.0) whose card
offers streaming streams: its artifact updates are relayed as they come (as artifact
chunks, ``append`` and ``lastChunk`` kept), and are not mirrored again when the task
settles.
Remote failures end the task ``failed`` with the remote's own status text (text parts
only, bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx

from gateway.a2a import settled
from gateway.agents.base import (
    AgentRequest,
    AgentUpdate,
    ArtifactChunk,
    ArtifactUpdate,
    MetadataUpdate,
    ReplyUpdate,
    StatusUpdate,
)
from gateway.agents.key_env import KeyEnvPolicy
from gateway.agents.registered import RegisteredAgent
from gateway.agents.remote_v1 import Relay, RemoteCallError, RemoteV1, v1_interface
from gateway.agents.specs import AgentEntry, RemoteConfig
from gateway.outbound import Allowlist, OutboundRefused

__all__ = ["Cards", "RemoteAgent"]

log = logging.getLogger("gateway.agents")

UNREACHABLE_TEXT = "The remote agent could not be reached."
NOT_ALLOWED_TEXT = "The remote agent is not allowed by the gateway's outbound allowlist."
TIMEOUT_TEXT = "The remote agent did not finish in time."
REMOTE_FAILED_TEXT = "The remote agent failed."
_MAX_ERROR_CHARS = 500
# How long a forwarded cancel (and learning the id of a task the remote is still answering
# for) may take before the run gives up on it.
CANCEL_SECONDS = 5.0


class Cards:
    """Remote agents' cards by URL, each kept for its agent's ``cardTtlSeconds``; one per
    agent factory, so two gateways in one process (an app and its tests) share none."""

    def __init__(self) -> None:
        self._by_url: dict[str, tuple[float, dict[str, Any]]] = {}

    def get(self, url: str, ttl_seconds: float) -> dict[str, Any] | None:
        cached = self._by_url.get(url)
        if cached is None or time.monotonic() - cached[0] >= ttl_seconds:
            return None
        return cached[1]

    def put(self, url: str, card: dict[str, Any]) -> None:
        self._by_url[url] = (time.monotonic(), card)


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
        self,
        entry: AgentEntry,
        config: RemoteConfig,
        allowlist: Allowlist,
        http: httpx.AsyncClient,
        key_env: KeyEnvPolicy,
        cards: Cards,
    ) -> None:
        super().__init__(entry)
        self._config, self._allowlist, self._http = config, allowlist, http
        self._key_env, self._cards = key_env, cards

    def _headers(self) -> dict[str, str]:
        key = self._config.key(self._key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _card(self) -> dict[str, Any]:
        url = self._config.cardUrl
        cached = self._cards.get(url, self._config.cardTtlSeconds)
        if cached is not None:
            return cached
        r = await self._http.get(url, headers=self._headers())
        r.raise_for_status()
        card = r.json()
        if not isinstance(card, dict):
            raise ValueError("the agent card is not a JSON object")
        self._cards.put(url, card)
        return card

    async def _client(self) -> RemoteV1 | _Sdk03:
        from a2a.client import ClientConfig, ClientFactory
        from a2a.types import AgentCard, TransportProtocol

        raw = await self._card()
        interface = v1_interface(raw)
        if interface is not None:
            await self._allowlist.check(interface["url"])  # the card names where to send
            streams = bool((raw.get("capabilities") or {}).get("streaming"))
            streaming = self._config.blocking and streams
            return RemoteV1(self._http, interface, self._headers(), streaming)
        card = AgentCard.model_validate(raw)
        for named in [card, *(card.additional_interfaces or ())]:
            await self._allowlist.check(named.url)  # the card names where to send
        config = ClientConfig(
            streaming=self._config.blocking and bool(card.capabilities.streaming),
            polling=not self._config.blocking,
            httpx_client=self._http,
            supported_transports=[TransportProtocol.jsonrpc, TransportProtocol.http_json],
        )
        return _Sdk03(ClientFactory(config).create(card), self._headers())

    async def run(self, request: AgentRequest) -> AsyncIterator[AgentUpdate]:
        from a2a.client import A2AClientError

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
        outgoing: dict[str, Any] = {
            "kind": "message",
            "role": "user",
            "messageId": str(uuid.uuid4()),
            "parts": list(request.message.get("parts") or ()),
        }
        if remote_context:
            outgoing["contextId"] = remote_context
        if remote_task:
            outgoing["taskId"] = remote_task
        async for update in self._exchange(client, outgoing):
            yield update

    async def _exchange(
        self, client: RemoteV1 | _Sdk03, outgoing: dict[str, Any]
    ) -> AsyncIterator[AgentUpdate]:
        """Send, poll until the remote task settles, mirror it; forward a cancel."""
        from a2a.client import A2AClientError

        sent: list[str] = []  # the remote task while it runs (for a cancel)
        try:
            async with asyncio.timeout(self._config.timeoutSeconds):
                async for update in _settled(client, outgoing, self._config, sent):
                    yield update
        except (asyncio.CancelledError, TimeoutError, GeneratorExit) as exc:
            # Stopped before the remote task settled: canceled, out of time, or closed by a
            # run that ended while an update was being written. The remote task stops too.
            if sent:
                await _forward_cancel(client, sent[-1])
            if not isinstance(exc, TimeoutError):
                raise
            yield StatusUpdate("failed", TIMEOUT_TEXT)
        except (A2AClientError, httpx.HTTPError, RemoteCallError, ValueError) as exc:
            log.warning("remote call failed", extra={"agent": self.id, "error": type(exc).__name__})
            yield StatusUpdate("failed", UNREACHABLE_TEXT)


class _Sdk03:
    """A 0.3 remote through the official a2a-sdk client, with the canonical JSON in and out."""

    def __init__(self, client: Any, headers: dict[str, str]) -> None:
        from a2a.client import ClientCallContext

        self._client = client
        self._call = ClientCallContext(state={"http_kwargs": {"headers": headers}})

    async def send(
        self, message: dict[str, Any], blocking: bool, relay: Relay | None = None
    ) -> dict[str, Any]:
        """The remote's answer; a streamed answer's artifact updates go to ``relay`` as they
        come (with the remote artifact's id)."""
        from a2a.types import Message, TaskArtifactUpdateEvent

        answer: Any = None
        outgoing = Message.model_validate(message)
        async for event in self._client.send_message(outgoing, context=self._call):
            answer = event[0] if isinstance(event, tuple) else event
            update = event[1] if isinstance(event, tuple) else None
            if relay is not None and isinstance(update, TaskArtifactUpdateEvent):
                artifact = update.artifact
                parts = [_dump(p) for p in artifact.parts]
                chunk = ArtifactChunk(parts, artifact.name, bool(update.append),
                                      bool(update.last_chunk))  # fmt: skip
                relay(artifact.artifact_id, chunk)
        if answer is None:
            raise RemoteCallError("message/send")
        return _dump(answer)

    async def get(self, task_id: str) -> dict[str, Any]:
        from a2a.types import TaskQueryParams

        return _dump(await self._client.get_task(TaskQueryParams(id=task_id), context=self._call))

    async def cancel(self, task_id: str) -> None:
        from a2a.types import TaskIdParams

        await self._client.cancel_task(TaskIdParams(id=task_id), context=self._call)


def _state(task: dict[str, Any]) -> str:
    return str((task.get("status") or {}).get("state", "unknown"))


async def _relayed(
    sending: asyncio.Future[Any], relayed: asyncio.Queue[ArtifactChunk]
) -> AsyncIterator[ArtifactChunk]:
    """The chunks relayed while the send is under way, until it is done and all are out. A
    cancel leaves the send running (the caller learns the remote task to cancel from it)."""
    while not (sending.done() and relayed.empty()):
        if not relayed.empty():
            yield relayed.get_nowait()
            continue
        news = asyncio.ensure_future(relayed.get())
        try:
            await asyncio.wait({sending, news}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not news.done():
                news.cancel()
        if news.done() and not news.cancelled():
            yield news.result()


async def _learn_late(sending: asyncio.Future[Any], sent: list[str]) -> None:
    """Canceled while the send is in flight: the remote may have started a task already.
    Learn its id (within the cancel's bound) so that the cancel is forwarded to it."""
    with contextlib.suppress(Exception):
        late = await asyncio.wait_for(sending, CANCEL_SECONDS)
        if late.get("kind") != "message":
            sent.append(late["id"])


async def _settled(
    client: RemoteV1 | _Sdk03, outgoing: dict[str, Any], config: RemoteConfig, sent: list[str]
) -> AsyncIterator[AgentUpdate]:
    """Send the message (relaying what it streams), poll the remote task until it settles,
    and mirror the outcome."""
    relayed: asyncio.Queue[ArtifactChunk] = asyncio.Queue()
    streamed: set[str] = set()  # remote artifacts relayed as they came

    def relay(artifact_id: str, chunk: ArtifactChunk) -> None:
        streamed.add(artifact_id)
        relayed.put_nowait(chunk)

    sending = asyncio.ensure_future(client.send(outgoing, config.blocking, relay))
    try:
        async for chunk in _relayed(sending, relayed):
            yield chunk
        task = sending.result()
    except GeneratorExit:  # the run stopped while a chunk was being written
        sending.cancel()
        raise
    except asyncio.CancelledError:
        await _learn_late(sending, sent)
        raise
    if task.get("kind") == "message":
        for update in _answered(task):
            yield update
        return
    sent.append(task["id"])
    if not settled(_state(task)):
        yield StatusUpdate("working", "The remote agent is working.")
    while not settled(_state(task)):
        await asyncio.sleep(config.pollIntervalSeconds)
        task = await client.get(task["id"])
    sent.clear()  # settled: nothing left to cancel when the mirroring is cut short
    for update in _settle(task, streamed):
        yield update


def _answered(reply: dict[str, Any]) -> list[AgentUpdate]:
    """A remote that answered with a message, not a task."""
    ids = {"contextId": reply.get("contextId"), "taskId": None, "state": "completed"}
    return [
        MetadataUpdate({"remote": ids}),
        ReplyUpdate(reply.get("parts") or [], metadata={"remote": ids}),
        StatusUpdate("completed"),
    ]


async def _forward_cancel(client: RemoteV1 | _Sdk03, task_id: str) -> None:
    cancel = asyncio.wait_for(client.cancel(task_id), CANCEL_SECONDS)
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


def _settle(
    task: dict[str, Any], streamed: set[str] | frozenset[str] = frozenset()
) -> list[AgentUpdate]:
    """The updates that mirror a settled remote task (bar the ``streamed`` artifacts)."""
    status = task.get("status") or {}
    state = status.get("state", "failed")
    ids = {"contextId": task.get("contextId"), "taskId": task.get("id"), "state": state}
    updates: list[AgentUpdate] = [MetadataUpdate({"remote": ids})]
    for artifact in task.get("artifacts") or ():
        if artifact.get("artifactId") in streamed:
            continue
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
