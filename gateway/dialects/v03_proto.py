"""The A2A 0.3 proto-JSON dialect, both ways: proto-JSON of the 0.3 ``a2a.proto``, as the 0.3
SDK's REST client speaks it.

To the wire: message ``content``, ``ROLE_USER``, ``TASK_STATE_CANCELLED``, files as
``{"file": {"fileWithUri"...}}`` and data parts nested as ``{"data": {"data": {...}}}``;
only fields the 0.3 proto defines (its clients parse strictly).

From the wire: a tolerant reader of a send, which the canonical bindings use too (some A2A
SDK REST clients send this spelling): snake_case field names, ``ROLE_USER`` enums, parts
without ``kind`` and proto's nested ``{"data": {"data": {...}}}`` become the canonical
v0.3.0 JSON shape before validation.

Pure functions. The *contents* of data parts and metadata are never touched: they are the
caller's data.
"""

from __future__ import annotations

from typing import Any

from gateway.models import ArtifactUpdate, StatusUpdate, Task

__all__ = [
    "artifact_out",
    "artifact_update_out",
    "normalise_send_request",
    "status_out",
    "status_update_out",
    "task_out",
]

_STATE_NAMES = ("submitted", "working", "completed", "failed", "rejected")
_STATES = {s: f"TASK_STATE_{s.upper()}" for s in _STATE_NAMES} | {
    "canceled": "TASK_STATE_CANCELLED",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
}
_ROLES_OUT = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_FILE_OUT = {"uri": "fileWithUri", "bytes": "fileWithBytes", "mimeType": "mimeType"}

_REQUEST_FIELDS = {"request": "message", "configuration": "configuration"}
_CONFIG_FIELDS = {
    "accepted_output_modes": "acceptedOutputModes",
    "history_length": "historyLength",
    "push_notification_config": "pushNotificationConfig",
    "push_notification": "pushNotificationConfig",
    "pushNotification": "pushNotificationConfig",  # the 0.3 proto field, as MessageToDict spells it
}
_MESSAGE_FIELDS = {
    "message_id": "messageId",
    "context_id": "contextId",
    "task_id": "taskId",
    "reference_task_ids": "referenceTaskIds",
    "content": "parts",
}
# proto3 JSON: each field by its proto name or its lowerCamelCase JSON name.
_FILE_FIELDS = {
    "file_with_uri": "uri",
    "fileWithUri": "uri",
    "file_with_bytes": "bytes",
    "fileWithBytes": "bytes",
    "mime_type": "mimeType",
}
_ROLES_IN = {"ROLE_USER": "user", "ROLE_AGENT": "agent", "USER": "user", "AGENT": "agent"}


# --- to the wire ---------------------------------------------------------------------


def _part_out(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("kind")
    out: dict[str, Any]
    metadata = part.get("metadata")
    if kind == "data":
        out = {"data": {"data": part.get("data", {})}}
    elif kind == "file":
        file = part.get("file") or {}
        inner = {_FILE_OUT[k]: v for k, v in file.items() if k in _FILE_OUT and v}
        if file.get("name"):
            inner["name"] = file["name"]
        out = {"file": inner}
    else:
        out = {"text": part.get("text", "")}
    if metadata:
        out["metadata"] = metadata
    return out


def _parts_out(parts: Any) -> list[dict[str, Any]]:
    return [_part_out(p) for p in parts or () if isinstance(p, dict)]


def _message_out(message: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messageId": message.get("messageId", ""),
        "role": _ROLES_OUT.get(message.get("role", ""), "ROLE_UNSPECIFIED"),
        "content": _parts_out(message.get("parts")),
    }
    for key in ("contextId", "taskId", "metadata", "extensions"):
        if message.get(key):
            out[key] = message[key]
    return out


def artifact_out(artifact: dict[str, Any]) -> dict[str, Any]:
    """A canonical Artifact in 0.3 proto-JSON."""
    out: dict[str, Any] = {
        "artifactId": artifact.get("artifactId", ""),
        "parts": _parts_out(artifact.get("parts")),
    }
    for key in ("name", "description", "metadata", "extensions"):
        if artifact.get(key):
            out[key] = artifact[key]
    return out


def status_out(status: dict[str, Any]) -> dict[str, Any]:
    """A canonical TaskStatus in 0.3 proto-JSON."""
    out: dict[str, Any] = {"state": _STATES.get(status.get("state", ""), "TASK_STATE_UNSPECIFIED")}
    if isinstance(status.get("message"), dict):
        out["message"] = _message_out(status["message"])
    if status.get("timestamp"):
        out["timestamp"] = status["timestamp"]
    return out


def status_update_out(
    task_id: str, context_id: str, update: StatusUpdate, final: bool
) -> dict[str, Any]:
    """A stream's status event as a 0.3 ``StreamResponse`` (with ``final``)."""
    return {
        "statusUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "status": status_out(update.status.value),
            "final": final,
        }
    }


def artifact_update_out(task_id: str, context_id: str, update: ArtifactUpdate) -> dict[str, Any]:
    """A stream's artifact event as a 0.3 ``StreamResponse``."""
    return {
        "artifactUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "artifact": artifact_out(update.artifact),
            "append": update.append,
            "lastChunk": update.last_chunk,
        }
    }


def task_out(task: Task) -> dict[str, Any]:
    """A Task in 0.3 proto-JSON (its stored JSON parsed: every part is respelled)."""
    out: dict[str, Any] = {
        "id": task.id,
        "contextId": task.context_id,
        "status": status_out(task.status.value or {}),
    }
    if task.artifacts is not None and task.artifacts.value:
        out["artifacts"] = [artifact_out(a) for a in task.artifacts.value]
    if task.history:
        out["history"] = [_message_out(m.value) for m in task.history]
    if task.metadata is not None and task.metadata.value:
        out["metadata"] = task.metadata.value
    return out


# --- from the wire -------------------------------------------------------------------


def _rename(obj: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in obj.items():
        canonical = names.get(key, key)
        if canonical not in out or key == canonical:
            out[canonical] = value
    return out


def _normalise_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    part = dict(part)
    if "kind" not in part:
        for kind in ("text", "file", "data"):
            if kind in part:
                part["kind"] = kind
                break
    if part.get("kind") == "file" and isinstance(part.get("file"), dict):
        part["file"] = _rename(part["file"], _FILE_FIELDS)
    if part.get("kind") == "data":
        data = part.get("data")
        if isinstance(data, dict) and set(data) == {"data"} and isinstance(data["data"], dict):
            part["data"] = data["data"]
    return part


def _normalise_message(message: Any) -> Any:
    if not isinstance(message, dict):
        return message
    message = _rename(message, _MESSAGE_FIELDS)
    role = message.get("role")
    if isinstance(role, str):
        message["role"] = _ROLES_IN.get(role, role)
    parts = message.get("parts")
    if isinstance(parts, list):
        message["parts"] = [_normalise_part(p) for p in parts]
    return message


def normalise_send_request(body: Any) -> Any:
    """Return ``body`` in canonical A2A v0.3.0 JSON spelling (a new object)."""
    if not isinstance(body, dict):
        return body
    body = _rename(body, _REQUEST_FIELDS)
    if "message" in body:
        body["message"] = _normalise_message(body["message"])
    config = body.get("configuration")
    if isinstance(config, dict):
        body["configuration"] = _rename(config, _CONFIG_FIELDS)
    return body
