"""The canonical wire format: the gateway's REST API and A2A 0.3 JSON (JSON-RPC, SSE, 0.3
webhooks), written from the typed results (``gateway.models``).

The canonical spelling is the stored one, so the stored JSON of a task (its status,
artifacts, messages, metadata) is written as it is (``orjson.Fragment``): a task read from
Redis is answered without being parsed and serialised again. ``*_json`` functions return
values for ``orjson.dumps``; ``task_value`` a plain, parsed value (for code that reads into
it). The proto-JSON dialects are written by ``gateway.dialects``.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.api_keys import PREFIX, CreatedKey, KeyRecord
from gateway.clock import iso_from_ms
from gateway.models import (
    AgentList,
    AgentView,
    ArtifactUpdate,
    AuditPage,
    AuditRecord,
    ContextList,
    ContextPage,
    ContextSummary,
    ScrubReport,
    SearchHit,
    StatusUpdate,
    Task,
)

__all__ = [
    "agent_json",
    "agent_list_json",
    "artifact_update_json",
    "audit_page_json",
    "audit_record_json",
    "context_list_json",
    "context_page_json",
    "created_key_json",
    "hit_json",
    "key_json",
    "key_list_json",
    "scrub_json",
    "status_update_json",
    "task_json",
    "task_value",
]


def task_json(task: Task) -> dict[str, Any]:
    """The Task (``kind`` "task"); artifacts and history only when there are some to show
    (history: when asked for), metadata when set."""
    out: dict[str, Any] = {
        "id": task.id,
        "contextId": task.context_id,
        "kind": "task",
        "status": task.status.fragment(),
    }
    if task.artifacts is not None:
        out["artifacts"] = task.artifacts.fragment()
    if task.history is not None:
        out["history"] = [m.fragment() for m in task.history]
    if task.metadata is not None:
        out["metadata"] = task.metadata.fragment()
    return out


def task_value(task: Task) -> dict[str, Any]:
    """The Task as ``task_json`` writes it, parsed (for readers of its fields)."""
    out: dict[str, Any] = {
        "id": task.id,
        "contextId": task.context_id,
        "kind": "task",
        "status": task.status.value,
    }
    if task.artifacts is not None:
        out["artifacts"] = task.artifacts.value
    if task.history is not None:
        out["history"] = [m.value for m in task.history]
    if task.metadata is not None:
        out["metadata"] = task.metadata.value
    return out


def status_update_json(
    task_id: str, context_id: str, update: StatusUpdate, final: bool
) -> dict[str, Any]:
    """A stream's ``status-update`` event, the logged TaskStatus written as it is."""
    return {
        "kind": "status-update",
        "taskId": task_id,
        "contextId": context_id,
        "status": update.status.fragment(),
        "final": final,
    }


def artifact_update_json(task_id: str, context_id: str, update: ArtifactUpdate) -> Any:
    """A stream's ``artifact-update`` event: its head, then the members of the logged
    ``{"artifact", "append", "lastChunk"}`` object written as they are (spliced in)."""
    head = {"kind": "artifact-update", "taskId": task_id, "contextId": context_id}
    raw = update.update.raw
    if raw[:1] == b"{" and raw[1:2] not in (b"}", b""):  # compact, as orjson writes it
        return orjson.Fragment(orjson.dumps(head)[:-1] + b"," + raw[1:])
    return {**head, **update.update.value}


def _summary_json(summary: ContextSummary) -> dict[str, Any]:
    return {
        "id": summary.id,
        "createdAt": iso_from_ms(summary.created_ms),
        "updatedAt": iso_from_ms(summary.updated_ms),
        "expiresAt": iso_from_ms(summary.expires_ms),
        "taskCount": summary.task_count,
    }


def context_list_json(listing: ContextList) -> dict[str, Any]:
    """``GET /v1/contexts``."""
    return {
        "items": [_summary_json(s) for s in listing.items],
        "total": listing.total,
        "limit": listing.limit,
        "offset": listing.offset,
    }


def context_page_json(page: ContextPage) -> dict[str, Any]:
    """``GET /v1/contexts/{id}``: the page's tasks with their whole history (and the
    subject the context is bound to, when it is)."""
    subject = {"subject": page.subject} if page.subject is not None else {}
    return {
        "id": page.id,
        **subject,
        "items": [task_json(t) for t in page.tasks],
        "total": page.total,
        "limit": page.limit,
        "offset": page.offset,
        "expiresAt": iso_from_ms(page.expires_ms),
        "memory": {"indexed": page.indexed, "pending": page.pending},
    }


def hit_json(hit: SearchHit) -> dict[str, Any]:
    """A search hit ``{messageId, taskId, score, text}``."""
    return {
        "messageId": hit.message_id,
        "taskId": hit.task_id,
        "score": hit.score,
        "text": hit.text,
    }


def scrub_json(report: ScrubReport) -> dict[str, int]:
    """A scrub's receipt (the audit entry's counts)."""
    return {
        "messages": report.messages,
        "tasks": report.tasks,
        "vectors": report.vectors,
        "pendingJobs": report.pending_jobs,
        "deadLetters": report.dead_letters,
        "memoriesQueued": report.memories_queued,
    }


def _when(ms: int) -> str | None:
    return iso_from_ms(ms) if ms else None


def key_json(record: KeyRecord) -> dict[str, Any]:
    """An API key's record as the API and the command line show it (never its hash)."""
    return {
        "id": record.id,
        "prefix": f"{PREFIX}{record.id}_",
        "tenant": record.tenant,
        "user": record.user,
        "roles": list(record.roles),
        "name": record.name,
        "createdAt": _when(record.created_ms),
        "expiresAt": _when(record.expires_ms),
        "revokedAt": _when(record.revoked_ms),
        "lastUsedAt": _when(record.last_used_ms),
        "replacedBy": record.replaced_by or None,
    }


def key_list_json(records: list[KeyRecord]) -> dict[str, Any]:
    """``GET /keys``."""
    return {"items": [key_json(r) for r in records]}


def created_key_json(created: CreatedKey) -> dict[str, Any]:
    """A new key's record and the key, the only time it is shown."""
    return {**key_json(created.record), "key": created.key}


def agent_json(agent: AgentView) -> dict[str, Any]:
    """An agent of the registry (``/agents``)."""
    if agent.built_in:
        return {
            "id": agent.id,
            "name": agent.name,
            "description": agent.description,
            "type": agent.type,
            "builtIn": True,
            "skills": agent.skills,
        }
    return {
        "id": agent.id,
        "name": agent.name,
        "description": agent.description,
        "systemPrompt": agent.system_prompt,
        "type": agent.type,
        "config": agent.config,
        "skills": agent.skills,
        "ephemeral": agent.ephemeral,
        "revision": agent.revision,
        "createdAt": agent.created_at,
        "updatedAt": agent.updated_at,
        "builtIn": False,
    }


def agent_list_json(listing: AgentList) -> dict[str, Any]:
    """``GET /agents``."""
    return {"items": [agent_json(a) for a in listing.items], "total": listing.total}


def audit_record_json(record: AuditRecord) -> dict[str, Any]:
    """An audit entry as ``GET /audit`` and the JSON-lines mirror show it."""
    out: dict[str, Any] = {
        "id": record.id,
        "time": iso_from_ms(record.time_ms),
        "tenant": record.tenant,
        "user": record.user,
        "credential": record.credential,
        "operation": record.operation,
        "method": record.method,
        "status": record.status,
        "outcome": record.outcome,
        "requestId": record.request_id,
        "client": record.client,
        **record.ids,
    }
    if record.removed:
        out["removed"] = record.removed
    return out


def audit_page_json(page: AuditPage) -> dict[str, Any]:
    """``GET /audit``."""
    return {"items": [audit_record_json(r) for r in page.items], "nextCursor": page.next_cursor}
