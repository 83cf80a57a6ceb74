"""A tolerant reader for the proto-JSON spelling some A2A SDK REST clients send, and the
proto3 JSON rules the A2A 1.0 readers share: an enum is given by its name or its number, a
part holds one content (a oneof), a null member is unset.

Pure functions: rewrite snake_case field names, ``ROLE_USER`` enums, parts without
``kind`` and proto's nested ``{"data": {"data": {...}}}`` into the canonical v0.3.0
JSON shape before validation. The *contents* of DataParts and metadata are never
touched: they are the caller's data.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidParamsError

__all__ = [
    "ROLES_V1",
    "TASK_STATES_V1",
    "enum_name",
    "normalise_send_request",
    "one_content_per_part",
    "open_enum",
]

_CONTENT_V1 = ("text", "raw", "url", "data")
# The A2A 1.0 enums' names, by number.
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
_FILE_FIELDS = {
    "file_with_uri": "uri",
    "file_with_bytes": "bytes",
    "mime_type": "mimeType",
}
_ROLES = {"ROLE_USER": "user", "ROLE_AGENT": "agent", "USER": "user", "AGENT": "agent"}


def enum_name(value: Any, names: tuple[str, ...]) -> Any:
    """An enum given by its number as its name (proto3 JSON); anything else as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    return value


def open_enum(value: Any, names: tuple[str, ...], known: Any = ()) -> Any:
    """A request's enum as the official 1.x servers read it (protobuf's parser, unknown
    fields ignored): a name or number; a name or number it does not know (a newer
    proto's, or ``"UNRECOGNIZED"``, which protobuf-es clients send for an unset enum) is
    the unspecified value (``names[0]``). ``known``: other names read too. Anything that
    is no enum at all (a boolean, a fraction, an object) is left for validation to refuse."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return names[value] if 0 <= value < len(names) else names[0]
    if isinstance(value, str) and value not in names and value not in known:
        return names[0]
    return value


def one_content_per_part(message: Any) -> None:
    """Refuse a 1.0 message (of a request) with a part that holds more than one content:
    ``text``, ``raw``, ``url``, ``data`` are a oneof. A null member is unset, but for
    ``data``: its null is the null value."""
    parts = message.get("parts") if isinstance(message, dict) else None
    for n, part in enumerate(parts if isinstance(parts, list) else ()):
        if not isinstance(part, dict) or "kind" in part:
            continue
        held = [k for k in _CONTENT_V1 if k in part and (part[k] is not None or k == "data")]
        if len(held) > 1:
            reason = f"holds {' and '.join(held)}: a part holds one of text, raw, url and data"
            error = {"field": f"message.parts.{n}", "reason": reason}
            raise InvalidParamsError("A part holds one content", data={"errors": [error]})


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
        message["role"] = _ROLES.get(role, role)
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
