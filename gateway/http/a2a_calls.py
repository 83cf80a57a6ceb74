"""What every A2A binding does with a call, in the canonical spelling: the one adapter from
a request's parameters to the services (send, stream, subscribe, get, cancel, list), shared
by the canonical REST routes, the JSON-RPC binding, the proto-JSON REST bindings and gRPC
(through the JSON-RPC methods). Wire dialects are the callers' business
(``gateway.dialects``); a send's answer is enveloped once (``sent``)."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import Field
from starlette.requests import Request
from starlette.types import Scope

from gateway.canonical import task_json
from gateway.dialects import STATE_FROM_V1, TASK_STATES_V1, V1, Dialect, open_enum, task_out
from gateway.errors import InvalidParamsError, MethodNotFoundError, VersionNotSupportedError
from gateway.http.audit import note_ids
from gateway.http.state import AppState, app_state, principal_of
from gateway.models import SendMessageRequest, Task
from gateway.models.requests import _Id, _Model
from gateway.principal import Principal
from gateway.push.configs import Version
from gateway.service.streams import TaskStream
from gateway.service.tasks import TaskFilter
from gateway.validation import MAX_INT, JsonInt, validated

__all__ = [
    "Call",
    "cancel_task",
    "get_task",
    "list_tasks",
    "negotiated_version",
    "send",
    "sent",
    "stream_send",
    "subscribe",
    "version_of",
]

VERSION_HEADER = "a2a-version"
_VERSION = re.compile(r"\s*(\d+)\.(\d+)(?:\.\d+)?\s*")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z")


def negotiated_version(request: Request) -> str | None:
    """The A2A version the ``A2A-Version`` header asks for (``"0.3"`` or ``"1.0"``), None
    when absent; any other version is ``VersionNotSupportedError``."""
    return version_of(request.headers.get(VERSION_HEADER))


def version_of(raw: str | None) -> str | None:
    """``negotiated_version`` of an ``A2A-Version`` value (a header, gRPC metadata)."""
    if raw is None or not raw.strip():
        return None
    match = _VERSION.fullmatch(raw)
    version = f"{match.group(1)}.{match.group(2)}" if match else ""
    if version not in ("0.3", "1.0"):
        raise VersionNotSupportedError(data={"supportedVersions": "0.3, 1.0"})
    return version


@dataclass(frozen=True)
class Call:
    """One call's context: the services, the caller, the agent the URL names, and the
    request's scope (for the ids of its audit entry)."""

    state: AppState
    principal: Principal
    agent_id: str
    scope: Scope

    @classmethod
    def of(cls, request: Request) -> Call:
        """The call an HTTP request makes: to the agent its path names, or the default."""
        state = app_state(request)
        agent_id = request.path_params.get("agent_id")
        if not isinstance(agent_id, str):
            agent_id = state.settings.default_agent
        return cls(state, principal_of(request), agent_id, request.scope)

    def noted(self, task: Task) -> Task:
        """The task, its ids noted for the audit entry."""
        note_ids(self.scope, task=task.id, context=task.context_id)
        return task

    def check_tenant(self, tenant: Any) -> None:
        """A 1.0 ``tenant`` (path prefix or field) must be the caller's own: any other is
        answered as a route that does not exist."""
        if tenant not in (None, "", self.principal.tenant):
            raise MethodNotFoundError("No such route")


class _TaskQuery(_Model):
    id: _Id
    historyLength: JsonInt | None = Field(default=None, ge=0, le=MAX_INT)


class _ListQuery(_Model):
    contextId: _Id | None = None
    status: str | None = None
    pageSize: JsonInt | None = Field(default=None, ge=1, le=100)
    pageToken: str | None = Field(default=None, max_length=1024)
    historyLength: JsonInt | None = Field(default=None, ge=0, le=MAX_INT)
    statusTimestampAfter: str | None = Field(default=None, max_length=64)
    includeArtifacts: bool = False


async def send(call: Call, body: Any, version: Version = "0.3") -> Task:
    """message/send with a canonical body: the task. ``version``: the binding's, whose
    payloads a push config in the send's configuration gets."""
    agent = await call.state.agents.resolve(call.principal.tenant, call.agent_id)
    request = validated(SendMessageRequest, body)
    sent = await call.state.messages.send(call.principal, agent, request, version)
    return call.noted(sent)


def sent(task: Task, dialect: Dialect | None = None) -> dict[str, Any]:
    """A send's answer where the binding envelopes it (the REST bindings, JSON-RPC 1.0): the
    task under ``task``, in the binding's dialect (None: the canonical spelling)."""
    return {"task": task_json(task) if dialect is None else task_out(task, dialect)}


async def stream_send(call: Call, body: Any) -> TaskStream:
    """message/stream with a canonical body: the task's events (refusals raise first)."""
    agent = await call.state.agents.resolve(call.principal.tenant, call.agent_id)
    request = validated(SendMessageRequest, body)
    task, stream = await call.state.streams.send(call.principal, agent, request)
    call.noted(task)
    return stream


async def subscribe(
    call: Call, task_id: Any, last_event_id: str | None, *, terminal: bool = True
) -> TaskStream:
    """tasks/resubscribe: the task's events from ``last_event_id`` (the SSE
    ``Last-Event-ID``) or from the task as it stands; ``terminal`` False refuses an ended
    task (A2A 1.0)."""
    await call.state.agents.resolve(call.principal.tenant, call.agent_id)
    query = validated(_TaskQuery, {"id": task_id})
    return await call.state.streams.subscribe(
        call.principal, query.id, last_event_id, terminal=terminal
    )


async def get_task(call: Call, task_id: Any, history_length: Any) -> Task:
    await call.state.agents.resolve(call.principal.tenant, call.agent_id)
    query = validated(_TaskQuery, {"id": task_id, "historyLength": history_length})
    return call.noted(await call.state.tasks.get(call.principal, query.id, query.historyLength))


async def cancel_task(call: Call, task_id: Any) -> Task:
    await call.state.agents.resolve(call.principal.tenant, call.agent_id)
    query = validated(_TaskQuery, {"id": task_id})
    return call.noted(await call.state.tasks.cancel(call.principal, query.id))


def _cursor(token: str | None) -> tuple[str, str] | None:
    if not token:
        return None
    try:
        stamp, task_id = orjson.loads(base64.urlsafe_b64decode(token.encode()))
        if isinstance(stamp, str) and isinstance(task_id, str):
            return stamp, task_id
    except (binascii.Error, ValueError, TypeError, orjson.JSONDecodeError):
        pass
    raise InvalidParamsError(
        "pageToken is not a token this server gave",
        data={"errors": [{"field": "pageToken", "reason": "unknown token"}]},
    )


def _token(last: tuple[str, str] | None) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(list(last))).decode() if last else ""


def _invalid(field: str, reason: str) -> InvalidParamsError:
    return InvalidParamsError(
        f"{field} {reason}", data={"errors": [{"field": field, "reason": reason}]}
    )


def _instant(stamp: str) -> datetime:
    """An RFC 3339 UTC timestamp (``Z``) as a datetime; one that names no instant (month 13,
    hour 99, a leap second) is refused like any other malformed one."""
    if _TIMESTAMP.fullmatch(stamp):
        try:
            return datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00")
        except ValueError:
            pass
    raise _invalid("statusTimestampAfter", "must be an RFC 3339 UTC timestamp")


async def list_tasks(call: Call, params: dict[str, Any]) -> dict[str, Any]:
    """ListTasks (A2A 1.0): the caller's tasks, newest status first, a page at a time; the
    answer in the 1.0 dialect. ``status``: a TaskState's name or number."""
    await call.state.agents.resolve(call.principal.tenant, call.agent_id)
    # proto3: an empty string is an unset field; an enum is given by name or number, an
    # unknown one is unspecified (no filter), as the official servers read it.
    status = open_enum(params.get("status"), TASK_STATES_V1, STATE_FROM_V1)
    params = {**params, "status": status}
    query = validated(_ListQuery, {k: v for k, v in params.items() if v not in ("", None)})
    state = None
    if query.status not in (None, "", "TASK_STATE_UNSPECIFIED"):
        state = STATE_FROM_V1.get(str(query.status))
        if state is None:
            raise _invalid("status", "must be a TaskState (TASK_STATE_...)")
    after = None if query.statusTimestampAfter is None else _instant(query.statusTimestampAfter)
    page_size = query.pageSize or 50
    page = await call.state.tasks.list(
        call.principal,
        TaskFilter(
            context_id=query.contextId,
            state=state,
            updated_after=after,
            page_size=page_size,
            after=_cursor(query.pageToken),
            history_length=query.historyLength or 0,
            artifacts=query.includeArtifacts,
        ),
    )
    return {
        "tasks": [task_out(t, V1) for t in page.tasks],
        "nextPageToken": _token(page.last),
        "pageSize": page_size,
        "totalSize": page.total,
    }
