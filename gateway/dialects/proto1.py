"""The A2A 1.0 dialect as ``a2a.v1`` proto messages (the gRPC binding), both ways, without
proto3 JSON in between.

To the wire: the typed results (a Task, a stream's events) written into the reply message
the caller hands in, field for field what ``ParseDict`` makes of ``v1.py``'s writers'
JSON: the same parts (``text``, ``raw``, ``url``, ``data`` with ``media_type`` and
``filename``, a non-object data value given back as it came), enums by number, metadata
and data as ``Struct`` and ``Value`` untouched.

From the wire: a ``SendMessageRequest`` read into the proto3 JSON ``MessageToDict`` gives
(fields left at their default are absent, bytes in base64, ``Value`` numbers as floats, an
enum number the proto does not know as that number), for ``read_v1_send`` to read as it
reads the other 1.0 bindings' requests.

The messages are taken as they come (``Any``): this layer names no binding's stubs.
"""

from __future__ import annotations

import base64
import math
from typing import Any

from google.protobuf.json_format import MessageToDict

from gateway.dialects.v1 import ROLES_V1, STATE_FROM_V1, TASK_STATES_V1, data_value
from gateway.models import ArtifactUpdate, StatusUpdate, Task

__all__ = ["read_send_proto", "write_stream_event", "write_task"]

# The canonical states' and roles' numbers in the 1.0 enums (any other: unspecified, 0).
_STATE_NUMBERS = {
    state: TASK_STATES_V1.index(name)
    for name, state in STATE_FROM_V1.items()
    if name in TASK_STATES_V1
}
_ROLE_NUMBERS = {"user": ROLES_V1.index("ROLE_USER"), "agent": ROLES_V1.index("ROLE_AGENT")}


# --- to the wire ---------------------------------------------------------------------


def _value(out: Any, value: Any) -> None:
    """A JSON value into a ``google.protobuf.Value``, as ``ParseDict`` writes it."""
    if isinstance(value, dict):
        out.struct_value.Clear()  # an empty object is an object, not an unset value
        out.struct_value.update(value)
    elif isinstance(value, list | tuple):
        out.list_value.Clear()
        out.list_value.extend(value)
    elif value is None:
        out.null_value = 0
    elif isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, int | float):
        out.number_value = value
    else:
        raise ValueError(f"a data value of type {type(value).__name__}")


def _raw(text: Any) -> bytes:
    """A file's base64 ``bytes`` decoded as ``ParseDict`` decodes a ``bytes`` field."""
    encoded = text.encode() if isinstance(text, str) else text
    return base64.urlsafe_b64decode(encoded + b"=" * (4 - len(encoded) % 4))


def _part(out: Any, part: dict[str, Any]) -> None:
    kind = part.get("kind")
    metadata = part.get("metadata")
    if kind == "data":
        data, metadata = data_value(part)
        _value(out.data, data)
    elif kind == "file":
        file = part.get("file") or {}
        if "uri" in file:
            out.url = file["uri"]
        else:
            out.raw = _raw(file.get("bytes", ""))
        if file.get("mimeType"):
            out.media_type = file["mimeType"]
        if file.get("name"):
            out.filename = file["name"]
    else:
        out.text = part.get("text", "")
    if metadata:
        out.metadata.update(metadata)


def _parts(out: Any, parts: Any) -> None:
    for part in parts or ():
        if isinstance(part, dict):
            _part(out.add(), part)


def _message(out: Any, message: dict[str, Any]) -> None:
    out.message_id = message.get("messageId", "")
    out.role = _ROLE_NUMBERS.get(message.get("role", ""), 0)
    _parts(out.parts, message.get("parts"))
    if message.get("contextId"):
        out.context_id = message["contextId"]
    if message.get("taskId"):
        out.task_id = message["taskId"]
    if message.get("metadata"):
        out.metadata.update(message["metadata"])
    if message.get("extensions"):
        out.extensions.extend(message["extensions"])
    if message.get("referenceTaskIds"):
        out.reference_task_ids.extend(message["referenceTaskIds"])


def _artifact(out: Any, artifact: dict[str, Any]) -> None:
    out.artifact_id = artifact.get("artifactId", "")
    _parts(out.parts, artifact.get("parts"))
    for key, field in (("name", "name"), ("description", "description")):
        if artifact.get(key):
            setattr(out, field, artifact[key])
    if artifact.get("metadata"):
        out.metadata.update(artifact["metadata"])
    if artifact.get("extensions"):
        out.extensions.extend(artifact["extensions"])


def _status(out: Any, status: dict[str, Any]) -> None:
    out.SetInParent()
    out.state = _STATE_NUMBERS.get(status.get("state", ""), 0)
    if isinstance(status.get("message"), dict):
        _message(out.message, status["message"])
    if status.get("timestamp"):
        out.timestamp.FromJsonString(status["timestamp"])


def write_task(out: Any, task: Task) -> None:
    """A Task into an ``a2a.v1.Task`` message (its stored JSON parsed)."""
    out.SetInParent()
    out.id = task.id
    out.context_id = task.context_id
    _status(out.status, task.status.value or {})
    if task.artifacts is not None and task.artifacts.value:
        for artifact in task.artifacts.value:
            _artifact(out.artifacts.add(), artifact)
    for message in task.history or ():
        _message(out.history.add(), message.value)
    if task.metadata is not None and task.metadata.value:
        out.metadata.update(task.metadata.value)


def write_stream_event(
    out: Any, task_id: str, context_id: str, data: Task | StatusUpdate | ArtifactUpdate
) -> None:
    """A stream's event into an ``a2a.v1.StreamResponse`` message (a status update has no
    ``final`` in 1.0)."""
    if isinstance(data, Task):
        write_task(out.task, data)
        return
    event = out.status_update if isinstance(data, StatusUpdate) else out.artifact_update
    event.task_id = task_id
    event.context_id = context_id
    if isinstance(data, StatusUpdate):
        _status(event.status, data.status.value)
        return
    _artifact(event.artifact, data.artifact)
    event.artifact.SetInParent()
    event.append = data.append
    event.last_chunk = data.last_chunk


# --- from the wire -------------------------------------------------------------------


def _number(value: float) -> float:
    if math.isinf(value) or math.isnan(value):  # as MessageToDict refuses them
        raise ValueError("a Value's number is not finite")
    return value


def _plain(value: Any) -> Any:
    """A ``google.protobuf.Value`` as JSON, as ``MessageToDict`` writes it."""
    which = value.WhichOneof("kind")
    if which == "struct_value":
        return {k: _plain(v) for k, v in value.struct_value.fields.items()}
    if which == "list_value":
        return [_plain(v) for v in value.list_value.values]
    if which == "number_value":
        return _number(value.number_value)
    if which in ("string_value", "bool_value"):
        return getattr(value, which)
    return None


def _struct(struct: Any) -> dict[str, Any]:
    return {k: _plain(v) for k, v in struct.fields.items()}


def _enum(number: int, names: tuple[str, ...]) -> Any:
    return names[number] if 0 <= number < len(names) else number


def _part_in(part: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    content = part.WhichOneof("content")
    if content == "raw":
        out["raw"] = base64.b64encode(part.raw).decode()
    elif content == "data":
        out["data"] = _plain(part.data)
    elif content is not None:
        out[content] = getattr(part, content)
    if part.HasField("metadata"):
        out["metadata"] = _struct(part.metadata)
    if part.filename:
        out["filename"] = part.filename
    if part.media_type:
        out["mediaType"] = part.media_type
    return out


def _message_in(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, key in (("message_id", "messageId"), ("context_id", "contextId")):
        if getattr(message, field):
            out[key] = getattr(message, field)
    if message.task_id:
        out["taskId"] = message.task_id
    if message.role:
        out["role"] = _enum(message.role, ROLES_V1)
    if message.parts:
        out["parts"] = [_part_in(p) for p in message.parts]
    if message.HasField("metadata"):
        out["metadata"] = _struct(message.metadata)
    if message.extensions:
        out["extensions"] = list(message.extensions)
    if message.reference_task_ids:
        out["referenceTaskIds"] = list(message.reference_task_ids)
    return out


def _configuration_in(config: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if config.accepted_output_modes:
        out["acceptedOutputModes"] = list(config.accepted_output_modes)
    if config.HasField("task_push_notification_config"):
        # rare, and all strings: protobuf's own writer
        out["taskPushNotificationConfig"] = MessageToDict(config.task_push_notification_config)
    if config.HasField("history_length"):
        out["historyLength"] = config.history_length
    if config.return_immediately:
        out["returnImmediately"] = True
    return out


def read_send_proto(request: Any) -> dict[str, Any]:
    """A ``SendMessageRequest`` as the proto3 JSON ``MessageToDict`` gives (camelCase names,
    defaults left out), not yet in the canonical spelling (``read_v1_send`` reads it)."""
    out: dict[str, Any] = {}
    if request.tenant:
        out["tenant"] = request.tenant
    if request.HasField("message"):
        out["message"] = _message_in(request.message)
    if request.HasField("configuration"):
        out["configuration"] = _configuration_in(request.configuration)
    if request.HasField("metadata"):
        out["metadata"] = _struct(request.metadata)
    return out
