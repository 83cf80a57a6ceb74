"""What clients send, modelled (pydantic): the one place where untrusted input becomes typed.
Only what clients send is modelled; stored objects are written from these models and read
back as the JSON they were written as."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.search_mode import Mode
from gateway.validation import MAX_INT, JsonInt

__all__ = [
    "DataPart",
    "FileContent",
    "FilePart",
    "KeyCreateRequest",
    "KeyRotateRequest",
    "Message",
    "Part",
    "SearchRequest",
    "SendConfiguration",
    "SendMessageRequest",
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
