"""A2A v0.3.0 request models, the one place where untrusted input becomes typed, and the
typed results the services return.

Requests (``requests.py``): only what clients send is modelled (pydantic). Stored objects are
written from these models and read back as the JSON they were written as.

Results (frozen dataclasses): a task (``tasks.py``), a context's page, a listing of
contexts, a search hit, a scrub's report (``contexts.py``), the registry's agents
(``agents.py``), audit entries (``audit.py``); a stream's status and artifact events (named
tuples: one is built per event read, ``tasks.py``).
What was stored as A2A JSON (a status, artifacts, messages, metadata) is carried as
``RawJson`` (``raw_json.py``): the bytes as stored, parsed only when something reads into
them. The wire formats are written from these objects by one serializer each
(``gateway.canonical`` for the canonical JSON, ``gateway.dialects`` for the proto-JSON
dialects), which write a ``RawJson`` as it is where the format is the stored one.
"""

from __future__ import annotations

from gateway.models.agents import AgentList, AgentView
from gateway.models.audit import AuditPage, AuditRecord
from gateway.models.contexts import (
    ContextList,
    ContextPage,
    ContextSummary,
    ScrubReport,
    SearchHit,
)
from gateway.models.raw_json import RawJson
from gateway.models.requests import (
    DataPart,
    FileContent,
    FilePart,
    KeyCreateRequest,
    KeyRotateRequest,
    Message,
    Part,
    SearchRequest,
    SendConfiguration,
    SendMessageRequest,
    TextPart,
)
from gateway.models.tasks import ArtifactUpdate, StatusUpdate, Task

__all__ = [
    "AgentList",
    "AgentView",
    "ArtifactUpdate",
    "AuditPage",
    "AuditRecord",
    "ContextList",
    "ContextPage",
    "ContextSummary",
    "DataPart",
    "FileContent",
    "FilePart",
    "KeyCreateRequest",
    "KeyRotateRequest",
    "Message",
    "Part",
    "RawJson",
    "ScrubReport",
    "SearchHit",
    "SearchRequest",
    "SendConfiguration",
    "SendMessageRequest",
    "StatusUpdate",
    "Task",
    "TextPart",
]
