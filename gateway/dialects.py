"""The wire dialects of A2A objects, as pure conversions from and to the canonical JSON.

The core stores and returns A2A v0.3.0 JSON (``kind`` fields, ``"completed"``, ``"user"``).
Bindings other than the canonical REST and the 0.3 JSON-RPC speak one of two proto-JSON
dialects:

- ``V03_PROTO``: proto-JSON of the 0.3 ``a2a.proto`` (the 0.3 SDK's REST client): message
  ``content``, ``TASK_STATE_CANCELLED``, files as ``{"file": {"fileWithUri"...}}`` and data
  parts nested as ``{"data": {"data": {...}}}``;
- ``V1``: A2A 1.0 (``a2a.v1`` proto-JSON): ``parts`` without ``kind`` (``text``, ``raw``,
  ``url``, ``data`` with ``mediaType`` and ``filename``), ``TASK_STATE_CANCELED``,
  ``referenceTaskIds`` on messages, errors as ``google.rpc.Status`` with ``ErrorInfo``.

Readers turn 1.0 requests into the canonical spelling (enums by name or number, roles also
by their canonical names, an unknown enum value as unspecified, a sender's unspecified role
as ``user``; ``gateway.protojson`` reads the 0.3 proto spelling); writers turn
canonical answers into each dialect, leaving only fields the dialect's proto defines (its
clients parse strictly). The contents of data parts and metadata pass untouched.

A 1.0 data part may hold any JSON value; the canonical (0.3) data part holds an object. A
value that is not an object is stored as ``{"value": <it>}`` with ``"$jsonValue": true`` in
the part's metadata, and the 1.0 writer gives it back as it came; 0.3 readers see the
wrapped object.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from gateway.errors import GatewayError
from gateway.models import ArtifactUpdate, StatusUpdate, Task
from gateway.protojson import (
    ROLES_V1,
    TASK_STATES_V1,
    enum_name,
    one_content_per_part,
    open_enum,
)

__all__ = [
    "V03_PROTO",
    "V1",
    "Dialect",
    "artifact_out",
    "artifact_update_out",
    "jsonrpc_error_v1",
    "message_v1",
    "read_v1_artifact",
    "read_v1_message",
    "read_v1_send",
    "read_v1_status",
    "read_v1_task",
    "reason",
    "rpc_status",
    "status_out",
    "status_update_out",
    "task_out",
]

Dialect = Literal["v03proto", "v1"]
V03_PROTO: Dialect = "v03proto"
V1: Dialect = "v1"
# Marks, in a data part's metadata, a 1.0 data value that is not an object (see above).
JSON_VALUE = "$jsonValue"

_STATE_NAMES = ("submitted", "working", "completed", "failed", "rejected")
_STATES_V1 = {s: f"TASK_STATE_{s.upper()}" for s in _STATE_NAMES} | {
    "canceled": "TASK_STATE_CANCELED",
    "input-required": "TASK_STATE_INPUT_REQUIRED",
    "auth-required": "TASK_STATE_AUTH_REQUIRED",
}
_STATES = {
    V1: _STATES_V1,
    V03_PROTO: _STATES_V1 | {"canceled": "TASK_STATE_CANCELLED"},
}
STATE_FROM_V1 = {v: k for k, v in _STATES_V1.items()} | {"TASK_STATE_CANCELLED": "canceled"}
_ROLES = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLES_IN = {"ROLE_USER": "user", "ROLE_AGENT": "agent", "user": "user", "agent": "agent"}
_DOMAIN = "a2a-protocol.org"
_GRPC_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "FAILED_PRECONDITION",
    413: "INVALID_ARGUMENT",
    415: "INVALID_ARGUMENT",
    421: "PERMISSION_DENIED",
    431: "INVALID_ARGUMENT",
    501: "UNIMPLEMENTED",
    502: "INTERNAL",
    503: "UNAVAILABLE",
}
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


# --- writers -------------------------------------------------------------------------


def _file_out(file: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    if dialect == V03_PROTO:
        names = {"uri": "fileWithUri", "bytes": "fileWithBytes", "mimeType": "mimeType"}
        inner = {names[k]: v for k, v in file.items() if k in names and v}
        if file.get("name"):
            inner["name"] = file["name"]
        return {"file": inner}
    out: dict[str, Any] = {"url": file["uri"]} if "uri" in file else {"raw": file.get("bytes", "")}
    if file.get("mimeType"):
        out["mediaType"] = file["mimeType"]
    if file.get("name"):
        out["filename"] = file["name"]
    return out


def _part_out(part: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    kind = part.get("kind")
    out: dict[str, Any]
    metadata = part.get("metadata")
    if kind == "data":
        data = part.get("data", {})
        if dialect == V1 and isinstance(metadata, dict) and metadata.get(JSON_VALUE) is True:
            data = data.get("value") if isinstance(data, dict) else data
            metadata = {k: v for k, v in metadata.items() if k != JSON_VALUE}
        out = {"data": {"data": data}} if dialect == V03_PROTO else {"data": data}
    elif kind == "file":
        out = _file_out(part.get("file") or {}, dialect)
    else:
        out = {"text": part.get("text", "")}
    if metadata:
        out["metadata"] = metadata
    return out


def _parts_out(parts: Any, dialect: Dialect) -> list[dict[str, Any]]:
    return [_part_out(p, dialect) for p in parts or () if isinstance(p, dict)]


def _message_out(message: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messageId": message.get("messageId", ""),
        "role": _ROLES.get(message.get("role", ""), "ROLE_UNSPECIFIED"),
        ("content" if dialect == V03_PROTO else "parts"): _parts_out(message.get("parts"), dialect),
    }
    for key in ("contextId", "taskId", "metadata", "extensions"):
        if message.get(key):
            out[key] = message[key]
    if dialect == V1 and message.get("referenceTaskIds"):
        out["referenceTaskIds"] = message["referenceTaskIds"]
    return out


def _artifact_out(artifact: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    out: dict[str, Any] = {
        "artifactId": artifact.get("artifactId", ""),
        "parts": _parts_out(artifact.get("parts"), dialect),
    }
    for key in ("name", "description", "metadata", "extensions"):
        if artifact.get(key):
            out[key] = artifact[key]
    return out


def status_out(status: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """A canonical TaskStatus in ``dialect``."""
    out_status: dict[str, Any] = {
        "state": _STATES[dialect].get(status.get("state", ""), "TASK_STATE_UNSPECIFIED")
    }
    if isinstance(status.get("message"), dict):
        out_status["message"] = _message_out(status["message"], dialect)
    if status.get("timestamp"):
        out_status["timestamp"] = status["timestamp"]
    return out_status


def artifact_out(artifact: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """A canonical Artifact in ``dialect``."""
    return _artifact_out(artifact, dialect)


def status_update_out(
    task_id: str, context_id: str, update: StatusUpdate, final: bool, dialect: Dialect
) -> dict[str, Any]:
    """A stream's status event as a ``StreamResponse`` in ``dialect`` (0.3 keeps ``final``,
    1.0 has none)."""
    out: dict[str, Any] = {
        "taskId": task_id,
        "contextId": context_id,
        "status": status_out(update.status.value, dialect),
    }
    if dialect == V03_PROTO:
        out["final"] = final
    return {"statusUpdate": out}


def artifact_update_out(
    task_id: str, context_id: str, update: ArtifactUpdate, dialect: Dialect
) -> dict[str, Any]:
    """A stream's artifact event as a ``StreamResponse`` in ``dialect``."""
    return {
        "artifactUpdate": {
            "taskId": task_id,
            "contextId": context_id,
            "artifact": _artifact_out(update.artifact, dialect),
            "append": update.append,
            "lastChunk": update.last_chunk,
        }
    }


def task_out(task: Task, dialect: Dialect) -> dict[str, Any]:
    """A Task in ``dialect`` (its stored JSON parsed: every part is respelled)."""
    out: dict[str, Any] = {
        "id": task.id,
        "contextId": task.context_id,
        "status": status_out(task.status.value or {}, dialect),
    }
    if task.artifacts is not None and task.artifacts.value:
        out["artifacts"] = [_artifact_out(a, dialect) for a in task.artifacts.value]
    if task.history:
        out["history"] = [_message_out(m.value, dialect) for m in task.history]
    if task.metadata is not None and task.metadata.value:
        out["metadata"] = task.metadata.value
    return out


def message_v1(message: dict[str, Any]) -> dict[str, Any]:
    """A canonical Message in the 1.0 dialect."""
    return _message_out(message, V1)


# --- errors --------------------------------------------------------------------------


def reason(exc: GatewayError) -> str:
    """The ``ErrorInfo.reason`` of an error: its name in UPPER_SNAKE_CASE, without
    ``Error`` (``TaskNotFoundError`` → ``TASK_NOT_FOUND``)."""
    if exc.name == "InternalError":
        return "INTERNAL_ERROR"
    return _WORD.sub("_", exc.name.removesuffix("Error")).upper()


def _error_info(exc: GatewayError) -> dict[str, Any]:
    info: dict[str, Any] = {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason(exc),
        "domain": _DOMAIN,
    }
    # ErrorInfo.metadata is a map of strings: only the scalar facts of the error's data.
    facts = {
        k: str(v) for k, v in (exc.data or {}).items() if isinstance(v, str | int | float | bool)
    }
    if facts:
        info["metadata"] = facts
    return info


def rpc_status(exc: GatewayError) -> dict[str, Any]:
    """The 1.0 HTTP+JSON error body: ``google.rpc.Status`` with an ``ErrorInfo``."""
    details: list[dict[str, Any]] = [_error_info(exc)]
    errors = (exc.data or {}).get("errors")
    if isinstance(errors, list):
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [
                    {"field": str(e.get("field", "")), "description": str(e.get("reason", ""))}
                    for e in errors
                    if isinstance(e, dict)
                ],
            }
        )
    return {
        "error": {
            "code": exc.status,
            "status": _GRPC_STATUS.get(exc.status, "INTERNAL"),
            "message": exc.message,
            "details": details,
        }
    }


def jsonrpc_error_v1(exc: GatewayError) -> dict[str, Any]:
    """The 1.0 JSON-RPC error object: ``data`` is a list of ``Any`` details."""
    return {
        "code": exc.code,
        "message": exc.message,
        "data": rpc_status(exc)["error"]["details"],
    }


# --- readers -------------------------------------------------------------------------


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


_MESSAGE_FIELDS_V1 = {
    "message_id": "messageId",
    "context_id": "contextId",
    "task_id": "taskId",
    "reference_task_ids": "referenceTaskIds",
}


def read_v1_message(message: Any) -> Any:
    """A 1.0 Message in the canonical spelling."""
    if not isinstance(message, dict):
        return message
    out = {_MESSAGE_FIELDS_V1.get(k, k): v for k, v in message.items()}
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
