"""The A2A 1.0 dialect (``a2a.v1`` proto-JSON), both ways, for both 1.0 bindings (REST and
JSON-RPC, and gRPC through them) and the ``a2a-remote`` agent speaking 1.0 to remote agents.

To the wire: ``parts`` without ``kind`` (``text``, ``raw``, ``url``, ``data`` with
``mediaType`` and ``filename``), ``TASK_STATE_CANCELED``, ``ROLE_USER``,
``referenceTaskIds`` on messages; only fields the 1.0 proto defines (its clients parse
strictly). The errors' bodies are ``errors_v1.py``'s.

From the wire: requests and a remote's answers in the canonical spelling, by the proto3
JSON rules (``proto3.py``): enums by name or number, roles also by their canonical names, an
unknown enum value as unspecified, a sender's unspecified role as ``user``; a part holds one
content (a oneof), a null member is unset.

A 1.0 data part may hold any JSON value; the canonical (0.3) data part holds an object. A
value that is not an object is stored as ``{"value": <it>}`` with ``"$jsonValue": true`` in
the part's metadata, and the writer gives it back as it came; 0.3 readers see the wrapped
object. The contents of data parts and metadata pass untouched.
"""

from __future__ import annotations

from typing import Any

from gateway.dialects.proto3 import enum_name, open_enum
from gateway.errors import InvalidParamsError
from gateway.models import ArtifactUpdate, StatusUpdate, Task

__all__ = [
    "JSON_VALUE",
    "ROLES_V1",
    "STATE_FROM_V1",
    "TASK_STATES_V1",
    "artifact_out",
    "artifact_update_out",
    "data_value",
    "message_v1",
    "one_content_per_part",
    "read_v1_artifact",
    "read_v1_message",
    "read_v1_send",
    "read_v1_status",
    "read_v1_task",
    "status_out",
    "status_update_out",
    "task_out",
]

# Marks, in a data part's metadata, a 1.0 data value that is not an object (see above).
JSON_VALUE = "$jsonValue"
# The 1.0 enums' names, by number.
ROLES_V1 = ("ROLE_UNSPECIFIED", "ROLE_USER", "ROLE_AGENT")
TASK_STATES_V1 = (
    "TASK_STATE_UNSPECIFIED",
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
)

_STATE_NAMES = ("submitted", "working", "completed", "failed", "rejected")
_STATES = {s: f"TASK_STATE_{s.upper()}" for s in _STATE_NAMES} | {
    "canceled": "TASK_STATE_CANCELED",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
}
STATE_FROM_V1 = {v: k for k, v in _STATES.items()} | {"TASK_STATE_CANCELLED": "canceled"}
_ROLES = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLES_IN = {"ROLE_USER": "user", "ROLE_AGENT": "agent", "user": "user", "agent": "agent"}
_CONTENT = ("text", "raw", "url", "data")
_MESSAGE_FIELDS = {
    "message_id": "messageId",
    "context_id": "contextId",
    "task_id": "taskId",
    "reference_task_ids": "referenceTaskIds",
}


# --- to the wire ---------------------------------------------------------------------


def _file_out(file: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"url": file["uri"]} if "uri" in file else {"raw": file.get("bytes", "")}
    if file.get("mimeType"):
        out["mediaType"] = file["mimeType"]
    if file.get("name"):
        out["filename"] = file["name"]
    return out


def data_value(part: dict[str, Any]) -> tuple[Any, Any]:
    """A stored DataPart's 1.0 ``data`` and ``metadata``: a value other than an object
    (marked ``$jsonValue`` in its metadata when read, ``_part_in``) unwrapped."""
    data, metadata = part.get("data", {}), part.get("metadata")
    if isinstance(metadata, dict) and metadata.get(JSON_VALUE) is True:
        data = data.get("value") if isinstance(data, dict) else data
        metadata = {k: v for k, v in metadata.items() if k != JSON_VALUE}
    return data, metadata


def _part_out(part: dict[str, Any]) -> dict[str, Any]:
    kind = part.get("kind")
    out: dict[str, Any]
    metadata = part.get("metadata")
    if kind == "data":
        data, metadata = data_value(part)
        out = {"data": data}
    elif kind == "file":
        out = _file_out(part.get("file") or {})
    else:
        out = {"text": part.get("text", "")}
    if metadata:
        out["metadata"] = metadata
    return out


def _parts_out(parts: Any) -> list[dict[str, Any]]:
    return [_part_out(p) for p in parts or () if isinstance(p, dict)]


def message_v1(message: dict[str, Any]) -> dict[str, Any]:
    """A canonical Message in the 1.0 dialect."""
    out: dict[str, Any] = {
        "messageId": message.get("messageId", ""),
        "role": _ROLES.get(message.get("role", ""), "ROLE_UNSPECIFIED"),
        "parts": _parts_out(message.get("parts")),
    }
    for key in ("contextId", "taskId", "metadata", "extensions"):
        if message.get(key):
            out[key] = message[key]
    if message.get("referenceTaskIds"):
        out["referenceTaskIds"] = message["referenceTaskIds"]
    return out


def artifact_out(artifact: dict[str, Any]) -> dict[str, Any]:
    """A canonical Artifact in the 1.0 dialect."""
    out: dict[str, Any] = {
        "artifactId": artifact.get("artifactId", ""),
        "parts": _parts_out(artifact.get("parts")),
    }
    for key in ("name", "description", "metadata", "extensions"):
        if artifact.get(key):
            out[key] = artifact[key]
    return out


def status_out(status: dict[str, Any]) -> dict[str, Any]:
    """A canonical TaskStatus in the 1.0 dialect."""
    out: dict[str, Any] = {"state": _STATES.get(status.get("state", ""), "TASK_STATE_UNSPECIFIED")}
    if isinstance(status.get("message"), dict):
        out["message"] = message_v1(status["message"])
    if status.get("timestamp"):
        out["timestamp"] = status["timestamp"]
    return out


def status_update_out(task_id: str, context_id: str, update: StatusUpdate) -> dict[str, Any]:
    """A stream's status event as a 1.0 ``StreamResponse`` (which has no ``final``)."""
    return {
        "statusUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "status": status_out(update.status.value),
        }
    }


def artifact_update_out(task_id: str, context_id: str, update: ArtifactUpdate) -> dict[str, Any]:
    """A stream's artifact event as a 1.0 ``StreamResponse``."""
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
    """A Task in the 1.0 dialect (its stored JSON parsed: every part is respelled)."""
    out: dict[str, Any] = {
        "id": task.id,
        "contextId": task.context_id,
        "status": status_out(task.status.value or {}),
    }
    if task.artifacts is not None and task.artifacts.value:
        out["artifacts"] = [artifact_out(a) for a in task.artifacts.value]
    if task.history:
        out["history"] = [message_v1(m.value) for m in task.history]
    if task.metadata is not None and task.metadata.value:
        out["metadata"] = task.metadata.value
    return out


# --- from the wire -------------------------------------------------------------------


def one_content_per_part(message: Any) -> None:
    """Refuse a 1.0 message (of a request) with a part that holds more than one content:
    ``text``, ``raw``, ``url``, ``data`` are a oneof. A null member is unset, but for
    ``data``: its null is the null value."""
    parts = message.get("parts") if isinstance(message, dict) else None
    for n, part in enumerate(parts if isinstance(parts, list) else ()):
        if not isinstance(part, dict) or "kind" in part:
            continue
        held = [k for k in _CONTENT if k in part and (part[k] is not None or k == "data")]
        if len(held) > 1:
            reason = f"holds {' and '.join(held)}: a part holds one of text, raw, url and data"
            error = {"field": f"message.parts.{n}", "reason": reason}
            raise InvalidParamsError("A part holds one content", data={"errors": [error]})


def _part_in(part: Any) -> Any:
    if not isinstance(part, dict) or "kind" in part:
        return part
    part = {k: v for k, v in part.items() if v is not None or k not in ("text", "raw", "url")}
    out: dict[str, Any]
    if "text" in part:
        out = {"kind": "text", "text": part["text"]}
    elif "data" in part and not isinstance(part["data"], dict):
        metadata = part.get("metadata") or {}
        if not isinstance(metadata, dict):
            return part  # validation names it
        marked = {**metadata, JSON_VALUE: True}
        return {"kind": "data", "data": {"value": part["data"]}, "metadata": marked}
    elif "data" in part:
        out = {"kind": "data", "data": part["data"]}
    elif "url" in part or "raw" in part:
        file: dict[str, Any] = {"uri": part["url"]} if "url" in part else {"bytes": part["raw"]}
        media_type = part.get("mediaType", part.get("media_type"))
        if media_type:
            file["mimeType"] = media_type
        if part.get("filename"):
            file["name"] = part["filename"]
        out = {"kind": "file", "file": file}
    else:
        return part  # no content: validation names it
    if part.get("metadata") is not None:
        out["metadata"] = part["metadata"]
    return out


def read_v1_message(message: Any) -> Any:
    """A 1.0 Message in the canonical spelling."""
    if not isinstance(message, dict):
        return message
    out = {_MESSAGE_FIELDS.get(k, k): v for k, v in message.items()}
    out.setdefault("kind", "message")
    if isinstance(role := enum_name(out.get("role"), ROLES_V1), str):
        out["role"] = _ROLES_IN.get(role, role)
    if isinstance(out.get("parts"), list):
        out["parts"] = [_part_in(p) for p in out["parts"]]
    return out


def _sent_message(message: Any) -> Any:
    """A sent 1.0 Message in the canonical spelling. Its role unset, unspecified or unknown
    (a newer proto's, protobuf-es's ``"UNRECOGNIZED"``) is the sender's, ``user``, as the
    official 1.x servers accept it; ``ROLE_AGENT`` stays, for validation to refuse."""
    one_content_per_part(message)
    if isinstance(message, dict):
        role = message.get("role")
        role = open_enum(0 if role is None else role, ROLES_V1, _ROLES_IN)
        message = {**message, "role": "ROLE_USER" if role == "ROLE_UNSPECIFIED" else role}
    return read_v1_message(message)


def read_v1_send(body: Any) -> Any:
    """A 1.0 SendMessageRequest in the canonical spelling (``returnImmediately`` becomes
    ``blocking``; absent, a 1.0 send blocks)."""
    if not isinstance(body, dict):
        return body
    out: dict[str, Any] = {"message": _sent_message(body.get("message"))}
    if "metadata" in body:
        out["metadata"] = body["metadata"]
    config = body.get("configuration")
    if config is None:
        return out
    if not isinstance(config, dict):
        out["configuration"] = config
        return out
    canonical: dict[str, Any] = {}
    for key, value in config.items():
        if key in ("acceptedOutputModes", "accepted_output_modes"):
            canonical["acceptedOutputModes"] = value
        elif key in ("historyLength", "history_length"):
            canonical["historyLength"] = value
        elif key in ("returnImmediately", "return_immediately"):
            canonical["blocking"] = not value if isinstance(value, bool) else value
        elif key in ("taskPushNotificationConfig", "task_push_notification_config"):
            canonical["pushNotificationConfig"] = value
    out["configuration"] = canonical
    return out


def read_v1_artifact(artifact: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 Artifact (of a remote's answer) in the canonical spelling."""
    return {**artifact, "parts": [_part_in(p) for p in artifact.get("parts") or ()]}


def read_v1_status(status: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 TaskStatus (of a remote's answer) in the canonical spelling."""
    state = enum_name(status.get("state"), TASK_STATES_V1)
    out: dict[str, Any] = {"state": STATE_FROM_V1.get(state, "unknown")}
    if isinstance(status.get("message"), dict):
        out["message"] = read_v1_message(status["message"])
    if status.get("timestamp"):
        out["timestamp"] = status["timestamp"]
    return out


def read_v1_task(task: dict[str, Any]) -> dict[str, Any]:
    """A 1.0 Task (a remote's answer) in the canonical spelling."""
    out: dict[str, Any] = {
        "id": task.get("id", ""),
        "contextId": task.get("contextId", ""),
        "kind": "task",
        "status": read_v1_status(task.get("status") or {}),
    }
    artifacts = [read_v1_artifact(a) for a in task.get("artifacts") or () if isinstance(a, dict)]
    if artifacts:
        out["artifacts"] = artifacts
    if task.get("history"):
        out["history"] = [read_v1_message(m) for m in task["history"]]
    if task.get("metadata"):
        out["metadata"] = task["metadata"]
    return out
