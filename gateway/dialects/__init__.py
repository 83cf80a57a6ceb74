"""The wire dialects of A2A objects, as pure conversions from and to the canonical JSON.

The core stores and returns A2A v0.3.0 JSON (``kind`` fields, ``"completed"``, ``"user"``).
Bindings other than the canonical REST and the 0.3 JSON-RPC speak one of two proto-JSON
dialects, one module each, holding both directions:

- ``V03_PROTO`` (``v03_proto.py``): proto-JSON of the 0.3 ``a2a.proto`` (the 0.3 SDK's REST
  client): message ``content``, ``TASK_STATE_CANCELLED``, files as
  ``{"file": {"fileWithUri"...}}`` and data parts nested as ``{"data": {"data": {...}}}``;
  its tolerant reader of a send serves the canonical bindings too;
- ``V1`` (``v1.py``): A2A 1.0 (``a2a.v1`` proto-JSON): ``parts`` without ``kind``
  (``text``, ``raw``, ``url``, ``data`` with ``mediaType`` and ``filename``),
  ``TASK_STATE_CANCELED``, ``referenceTaskIds`` on messages; its errors as
  ``google.rpc.Status`` with ``ErrorInfo`` (``errors_v1.py``), its readers by the proto3
  JSON rules for enums (``proto3.py``); for gRPC, the same written straight into and read
  straight out of the ``a2a.v1`` proto messages (``proto1.py``).

Writers turn canonical answers into each dialect, leaving only fields the dialect's proto
defines (its clients parse strictly); the functions here write in the dialect a binding
names. The contents of data parts and metadata pass untouched.
"""

from __future__ import annotations

from typing import Any, Literal

from gateway.dialects import v03_proto, v1
from gateway.dialects.errors_v1 import jsonrpc_error_v1, reason, rpc_status
from gateway.dialects.proto1 import read_send_proto, write_stream_event, write_task
from gateway.dialects.proto3 import enum_name, open_enum
from gateway.dialects.v03_proto import normalise_send_request
from gateway.dialects.v1 import (
    JSON_VALUE,
    ROLES_V1,
    STATE_FROM_V1,
    TASK_STATES_V1,
    message_v1,
    one_content_per_part,
    read_v1_artifact,
    read_v1_message,
    read_v1_send,
    read_v1_status,
    read_v1_task,
)
from gateway.models import ArtifactUpdate, StatusUpdate, Task

__all__ = [
    "JSON_VALUE",
    "ROLES_V1",
    "STATE_FROM_V1",
    "TASK_STATES_V1",
    "V03_PROTO",
    "V1",
    "Dialect",
    "artifact_out",
    "artifact_update_out",
    "enum_name",
    "jsonrpc_error_v1",
    "message_v1",
    "normalise_send_request",
    "one_content_per_part",
    "open_enum",
    "read_send_proto",
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
    "write_stream_event",
    "write_task",
]

Dialect = Literal["v03proto", "v1"]
V03_PROTO: Dialect = "v03proto"
V1: Dialect = "v1"


def status_out(status: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """A canonical TaskStatus in ``dialect``."""
    return v03_proto.status_out(status) if dialect == V03_PROTO else v1.status_out(status)


def artifact_out(artifact: dict[str, Any], dialect: Dialect) -> dict[str, Any]:
    """A canonical Artifact in ``dialect``."""
    return v03_proto.artifact_out(artifact) if dialect == V03_PROTO else v1.artifact_out(artifact)


def status_update_out(
    task_id: str, context_id: str, update: StatusUpdate, final: bool, dialect: Dialect
) -> dict[str, Any]:
    """A stream's status event as a ``StreamResponse`` in ``dialect`` (0.3 keeps ``final``,
    1.0 has none)."""
    if dialect == V03_PROTO:
        return v03_proto.status_update_out(task_id, context_id, update, final)
    return v1.status_update_out(task_id, context_id, update)


def artifact_update_out(
    task_id: str, context_id: str, update: ArtifactUpdate, dialect: Dialect
) -> dict[str, Any]:
    """A stream's artifact event as a ``StreamResponse`` in ``dialect``."""
    if dialect == V03_PROTO:
        return v03_proto.artifact_update_out(task_id, context_id, update)
    return v1.artifact_update_out(task_id, context_id, update)


def task_out(task: Task, dialect: Dialect) -> dict[str, Any]:
    """A Task in ``dialect`` (its stored JSON parsed: every part is respelled)."""
    return v03_proto.task_out(task) if dialect == V03_PROTO else v1.task_out(task)
