"""A2A v0.3.0 request models, the one place where untrusted input becomes typed, and the
typed results the services return.

Requests: only what clients send is modelled (pydantic). Stored objects are written from
these models and read back as the JSON they were written as.

Results (frozen dataclasses): a task, a context's page, a listing of contexts, a search hit,
a scrub's report, the registry's agents, audit entries; a stream's status and artifact events
(named tuples: one is built per event read).
What was stored as A2A JSON (a status, artifacts, messages, metadata) is carried as
``RawJson``: the bytes as stored, parsed only when something reads into them. The wire
formats are written from these objects by one serializer each (``gateway.canonical`` for
the canonical JSON, ``gateway.dialects`` for the proto-JSON dialects), which write a
``RawJson`` as it is where the format is the stored one.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.a2a import INTERRUPTED, TERMINAL
from gateway.search_mode import Mode
from gateway.validation import MAX_INT, JsonInt

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

_MAX_IDS = 100
# An absolute URI starts with its scheme (RFC 3986 §3.1), as openapi.yaml says.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


class _Model(BaseModel):
    # Strict: a JSON integer is an integer, a boolean a boolean — no coercion from strings,
    # booleans or floats.
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)


class _Body(_Model):
    # The gateway's own request bodies (not the protocol's objects): a field it does not
    # know is refused, so a misspelt one ({"grace": 2}) is not silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TextPart(_Model):
    kind: Literal["text"] = "text"
    text: str
    metadata: dict[str, Any] | None = None


class FileContent(_Model):
    """A file given inline (base64 ``bytes``) or by reference (``uri``), never both."""

    bytes: str | None = None
    uri: str | None = Field(default=None, min_length=1, max_length=8192)
    name: str | None = Field(default=None, max_length=1024)
    mimeType: str | None = Field(default=None, max_length=255)

    @model_validator(mode="after")
    def _exactly_one_source(self) -> FileContent:
        if (self.bytes is None) == (self.uri is None):
            raise ValueError("file needs exactly one of 'bytes' or 'uri'")
        return self

    @field_validator("bytes")
    @classmethod
    def _is_base64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError("file.bytes must be base64") from None
        return value

    @field_validator("uri")
    @classmethod
    def _has_scheme(cls, value: str | None) -> str | None:
        if value is not None and not _SCHEME.match(value):
            raise ValueError("file.uri must be an absolute URI")
        return value


class FilePart(_Model):
    kind: Literal["file"] = "file"
    file: FileContent
    metadata: dict[str, Any] | None = None


class DataPart(_Model):
    kind: Literal["data"] = "data"
    data: dict[str, Any]
    metadata: dict[str, Any] | None = None


Part = Annotated[TextPart | FilePart | DataPart, Field(discriminator="kind")]

_Id = Annotated[str, Field(min_length=1, max_length=256)]


class Message(_Model):
    kind: Literal["message"] = "message"
    role: Literal["user", "agent"]
    parts: list[Part] = Field(min_length=1, max_length=1000)
    messageId: _Id
    contextId: _Id | None = None
    taskId: _Id | None = None
    referenceTaskIds: list[_Id] | None = Field(default=None, max_length=_MAX_IDS)
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None

    @field_validator("role")
    @classmethod
    def _from_user(cls, value: str) -> str:
        if value != "user":
            raise ValueError("role must be 'user'")
        return value


class SendConfiguration(_Model):
    acceptedOutputModes: list[str] | None = Field(default=None, max_length=100)
    blocking: bool = True
    historyLength: JsonInt | None = Field(default=None, ge=0, le=MAX_INT)
    pushNotificationConfig: dict[str, Any] | None = None


class SendMessageRequest(_Model):
    message: Message
    configuration: SendConfiguration = Field(default_factory=SendConfiguration)
    metadata: dict[str, Any] | None = None


class SearchRequest(_Body):
    query: str = Field(min_length=1, max_length=10_000)
    topK: JsonInt = Field(default=5, ge=1, le=50)
    minScore: float | None = Field(default=None, ge=-1.0, le=1.0)
    mode: Mode = "hybrid"


_ROLE = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]


class KeyCreateRequest(_Body):
    """``POST /keys``: a key of the admin's tenant, for the admin itself (``user`` left out
    or its own) or a service user (see ``service/keys.py``)."""

    user: str | None = Field(default=None, min_length=1, max_length=256)
    roles: list[_ROLE] = Field(default_factory=list, max_length=32)
    name: str = Field(default="", max_length=200)
    expiresInSeconds: JsonInt | None = Field(default=None, ge=1, le=10 * 365 * 24 * 3600)

    @field_validator("user")
    @classmethod
    def _not_null(cls, value: str | None) -> str:
        # Left out means the caller; null is no user at all.
        if value is None:
            raise ValueError("may be left out, but not null")
        return value


class KeyRotateRequest(_Body):
    """``POST /keys/{id}:rotate``: how long the old key keeps working (0: not at all)."""

    graceSeconds: JsonInt = Field(default=0, ge=0, le=30 * 24 * 3600)


# --- results ---------------------------------------------------------------------------


class RawJson:
    """A JSON value as it was stored (compact UTF-8 JSON), passed through unparsed; ``value``
    parses it on first use."""

    __slots__ = ("_value", "raw")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self._value: Any = _UNPARSED

    @classmethod
    def of(cls, value: Any) -> RawJson:
        """A value built here (not read from the store)."""
        out = cls(orjson.dumps(value))
        out._value = value
        return out

    @property
    def value(self) -> Any:
        """The parsed value (shared: do not change it)."""
        if self._value is _UNPARSED:
            self._value = orjson.loads(self.raw)
        return self._value

    def fragment(self) -> orjson.Fragment:
        """The value for ``orjson.dumps``, written as it is."""
        return orjson.Fragment(self.raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawJson) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:  # never the content: it is PHI
        return f"RawJson({len(self.raw)} bytes)"


_UNPARSED: Any = object()


@dataclass(frozen=True, slots=True)
class Task:
    """An A2A Task. ``status`` is a TaskStatus, ``artifacts`` a JSON array of Artifacts
    (None: none), ``history`` its Messages (None: not asked for), ``metadata`` an object
    (the client's, with what the agent reported merged over it)."""

    id: str
    context_id: str
    status: RawJson
    artifacts: RawJson | None = None
    history: tuple[RawJson, ...] | None = None
    metadata: RawJson | None = None

    @property
    def state(self) -> str:
        return str(self.status.value.get("state", ""))

    @property
    def status_timestamp(self) -> str:
        return str(self.status.value.get("timestamp", ""))

    @property
    def artifact_list(self) -> list[dict[str, Any]]:
        """The artifacts, parsed (empty when none)."""
        return list(self.artifacts.value) if self.artifacts is not None else []

    def without_artifacts(self) -> Task:
        return replace(self, artifacts=None) if self.artifacts is not None else self


# The head of a stored TaskStatus as the gateway writes it (``state`` first, compact), and
# the states it may name.
_STATE_HEAD = b'{"state":"'
_STATE_OF = {
    name.encode(): name for name in (*TERMINAL, *INTERRUPTED, "submitted", "working", "unknown")
}


class StatusUpdate(NamedTuple):
    """A status event of a task's stream: the TaskStatus as stored, and its state. (The two
    event types are named tuples, not frozen dataclasses: one is built per event a stream
    reads, and a frozen dataclass's ``__init__`` costs about 1 µs more.)"""

    status: RawJson
    state: str

    @classmethod
    def read(cls, raw: bytes) -> StatusUpdate:
        """The event from its stored bytes: the state read off their head when they start
        with it (they do as the gateway writes them), else parsed."""
        status = RawJson(raw)
        if raw.startswith(_STATE_HEAD):
            state = _STATE_OF.get(raw[len(_STATE_HEAD) : raw.find(b'"', len(_STATE_HEAD))])
            if state is not None:
                return cls(status, state)
        value = status.value
        return cls(status, str(value.get("state", "")) if isinstance(value, dict) else "")


class ArtifactUpdate(NamedTuple):
    """An artifact event of a task's stream: ``{"artifact", "append", "lastChunk"}`` as
    stored (an object, those members in that order)."""

    update: RawJson

    @property
    def artifact(self) -> dict[str, Any]:
        return dict(self.update.value["artifact"])

    @property
    def append(self) -> bool:
        return bool(self.update.value.get("append"))

    @property
    def last_chunk(self) -> bool:
        return bool(self.update.value.get("lastChunk"))


@dataclass(frozen=True, slots=True)
class AgentView:
    """An agent of the registry as clients read it: a built-in one (``built_in``: only its
    id, name, description, type and skills), or a tenant's entry, secrets left out (its
    config shows ``apiKeySet`` for a stored ``apiKey``). ``skills`` are A2A AgentSkills."""

    id: str
    name: str
    description: str
    type: str
    skills: list[dict[str, Any]]
    built_in: bool
    system_prompt: str = ""
    config: dict[str, Any] | None = None
    ephemeral: bool = False
    revision: int = 0
    created_at: str = ""
    updated_at: str = ""


@dataclass(frozen=True, slots=True)
class AgentList:
    """A tenant's agents: the built-in ones, then its entries."""

    items: list[AgentView]
    total: int


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """An entry of the audit trail as read back: who (None: not known), the operation, its
    status and outcome, the ids it named (by the names shown, in their order) and what a
    scrub removed (by kind, empty for other operations). Never content."""

    id: str
    time_ms: int
    tenant: str | None
    user: str | None
    credential: str | None
    operation: str
    method: str
    status: int
    outcome: str
    request_id: str | None
    client: str | None
    ids: dict[str, str]
    removed: dict[str, int]


@dataclass(frozen=True, slots=True)
class AuditPage:
    """A page of the audit trail, newest first; ``next_cursor`` None: nothing older."""

    items: list[AuditRecord]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ContextSummary:
    """One entry of a listing of contexts (times in epoch milliseconds)."""

    id: str
    created_ms: int
    updated_ms: int
    expires_ms: int
    task_count: int


@dataclass(frozen=True, slots=True)
class ContextList:
    items: list[ContextSummary]
    total: int
    limit: int
    offset: int


@dataclass(frozen=True, slots=True)
class ContextPage:
    """A page of a context's tasks (oldest first), with its expiry and the count of its
    messages embedded and still waiting to be (context memory)."""

    id: str
    tasks: list[Task]
    total: int
    limit: int
    offset: int
    expires_ms: int
    indexed: int
    pending: int
    subject: str | None = None  # what the context is about, once bound


@dataclass(frozen=True, slots=True)
class ScrubReport:
    """What scrubbing a context removed: messages, tasks, vectors (embedded messages), runs
    and waiting messages or webhook deliveries of its unfinished tasks, dead letters, and
    long-term memories queued for deletion in Cortadel. The store's scrub returns what it
    removed from the context's keys; the service adds the deliveries and dead letters kept
    elsewhere."""

    messages: int
    tasks: int
    vectors: int
    pending_jobs: int
    dead_letters: int
    memories_queued: int


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A message found by a context search: its ids, its score, its embeddable text."""

    message_id: str | None
    task_id: str | None
    score: float
    text: str
