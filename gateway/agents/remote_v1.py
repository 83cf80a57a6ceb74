"""A2A 1.0 remotes: a small client of the 1.0 JSON-RPC and HTTP+JSON bindings.

The gateway's a2a-sdk is 0.3 (the two SDK generations cannot share one environment), so a
remote whose card offers 1.0 interfaces is spoken to here, in the 1.0 dialect of
``gateway.dialects``: the message goes out as 1.0 proto-JSON, the answer comes back in the
canonical spelling the rest of the gateway works in. JSON-RPC is preferred when the card
offers both; errors become ``RemoteCallError`` (never the remote's text).

A blocking send to a remote whose card offers streaming is a ``SendStreamingMessage``: the
server-sent events are read as they come (``httpx-sse``), each artifact update handed to
the caller's relay as an artifact chunk, the status updates folded into the task returned
when the stream ends.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import aconnect_sse

from gateway.agents.base import ArtifactChunk
from gateway.dialects import (
    message_v1,
    read_v1_artifact,
    read_v1_message,
    read_v1_status,
    read_v1_task,
)

__all__ = ["Relay", "RemoteCallError", "RemoteV1", "v1_interface"]

# Where a streamed answer's artifact updates go: (the remote artifact's id, the chunk).
Relay = Callable[[str, ArtifactChunk], None]

_VERSION_HEADER = {"A2A-Version": "1.0"}
_BINDINGS = ("JSONRPC", "HTTP+JSON")


class RemoteCallError(Exception):
    """The remote answered with an error, or with something that is not an answer."""


def v1_interface(card: dict[str, Any]) -> dict[str, Any] | None:
    """The 1.0 interface of a card to talk to (JSON-RPC first), or None for a 0.3 agent."""
    interfaces = [
        i
        for i in card.get("supportedInterfaces") or ()
        if isinstance(i, dict)
        and str(i.get("protocolVersion", "")).split(".")[0] == "1"
        and i.get("protocolBinding") in _BINDINGS
        and isinstance(i.get("url"), str)
    ]
    for binding in _BINDINGS:
        for interface in interfaces:
            if interface["protocolBinding"] == binding:
                return interface
    return None


@dataclass
class RemoteV1:
    http: httpx.AsyncClient
    interface: dict[str, Any]
    headers: dict[str, str]
    streaming: bool = False  # the card offers streaming

    @property
    def _rpc(self) -> bool:
        return bool(self.interface["protocolBinding"] == "JSONRPC")

    @property
    def _base(self) -> str:
        url: str = self.interface["url"].rstrip("/")
        tenant = self.interface.get("tenant")
        return f"{url}/{tenant}" if tenant and not self._rpc else url

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        if self.interface.get("tenant"):
            params = {**params, "tenant": self.interface["tenant"]}
        body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
        r = await self.http.post(
            self.interface["url"], json=body, headers={**self.headers, **_VERSION_HEADER}
        )
        r.raise_for_status()
        answer = r.json()
        if not isinstance(answer, dict) or "result" not in answer:
            raise RemoteCallError(method)
        return answer["result"]

    async def _rest(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        r = await self.http.request(
            method,
            self._base + path,
            json=body,
            params=params or None,
            headers={**self.headers, **_VERSION_HEADER},
        )
        if r.is_error:
            raise RemoteCallError(f"{method} {path.split('/')[1]}: {r.status_code}")
        return r.json()

    async def send(
        self, message: dict[str, Any], blocking: bool, relay: Relay | None = None
    ) -> dict[str, Any]:
        """Send a canonical message: the remote's Task or Message, canonical. Blocking, to a
        remote that streams, with a ``relay``: streamed, its artifact updates relayed."""
        params = {
            "message": message_v1(message),
            "configuration": {"returnImmediately": not blocking},
        }
        if blocking and self.streaming and relay is not None:
            return await self._stream(params, relay)
        if self._rpc:
            result = await self._call("SendMessage", params)
        else:
            result = await self._rest("POST", "/message:send", params)
        if isinstance(result, dict) and isinstance(result.get("task"), dict):
            return read_v1_task(result["task"])
        if isinstance(result, dict) and isinstance(result.get("message"), dict):
            answered: dict[str, Any] = read_v1_message(result["message"])
            return answered
        raise RemoteCallError("SendMessage")

    async def _stream(self, params: dict[str, Any], relay: Relay) -> dict[str, Any]:
        """``SendStreamingMessage``: the task as its events left it when the stream ended."""
        headers = {**self.headers, **_VERSION_HEADER}
        if self._rpc:
            if self.interface.get("tenant"):
                params = {**params, "tenant": self.interface["tenant"]}
            url = self.interface["url"]
            body: Any = {"jsonrpc": "2.0", "id": str(uuid.uuid4()),
                         "method": "SendStreamingMessage", "params": params}  # fmt: skip
        else:
            url, body = self._base + "/message:stream", params
        task: dict[str, Any] | None = None
        async with aconnect_sse(self.http, "POST", url, json=body, headers=headers) as source:
            if source.response.is_error:
                raise RemoteCallError(f"SendStreamingMessage: {source.response.status_code}")
            async for sse in source.aiter_sse():
                event = _event(sse.data, self._rpc)
                if isinstance(event.get("message"), dict):
                    answered: dict[str, Any] = read_v1_message(event["message"])
                    return answered
                task = _fold(task, event, relay)
        if task is None:
            raise RemoteCallError("SendStreamingMessage")
        return task

    async def get(self, task_id: str) -> dict[str, Any]:
        if self._rpc:
            task = await self._call("GetTask", {"id": task_id})
        else:
            task = await self._rest("GET", f"/tasks/{task_id}")
        if not isinstance(task, dict):
            raise RemoteCallError("GetTask")
        return read_v1_task(task)

    async def cancel(self, task_id: str) -> None:
        if self._rpc:
            await self._call("CancelTask", {"id": task_id})
        else:
            await self._rest("POST", f"/tasks/{task_id}:cancel", {})


def _event(data: str, rpc: bool) -> dict[str, Any]:
    """One server-sent event of a stream: a 1.0 StreamResponse (JSON-RPC: its ``result``)."""
    try:
        event = json.loads(data)
    except ValueError:
        raise RemoteCallError("SendStreamingMessage: not JSON") from None
    if rpc:
        event = event.get("result") if isinstance(event, dict) else None
    if not isinstance(event, dict):
        raise RemoteCallError("SendStreamingMessage: not an event")
    return event


def _fold(task: dict[str, Any] | None, event: dict[str, Any], relay: Relay) -> dict[str, Any]:
    """The task after one stream event; an artifact update goes to ``relay`` as a chunk."""
    if isinstance(event.get("task"), dict):
        return read_v1_task(event["task"])
    update = event.get("statusUpdate") or event.get("artifactUpdate")
    if not isinstance(update, dict):
        raise RemoteCallError("SendStreamingMessage: an unknown event")
    if task is None:  # a remote may begin with an update: the task is named in it
        task = read_v1_task({"id": update.get("taskId"), "contextId": update.get("contextId")})
    if isinstance(event.get("statusUpdate"), dict):
        return {**task, "status": read_v1_status(update.get("status") or {})}
    artifact = read_v1_artifact(update.get("artifact") or {})
    chunk = ArtifactChunk(artifact["parts"], artifact.get("name"), bool(update.get("append")),
                          bool(update.get("lastChunk")))  # fmt: skip
    relay(str(artifact.get("artifactId", "")), chunk)
    return task
