"""Push notification configs: reading them from each binding's spelling, and writing them
back (pure; no I/O).

One stored form (``PushConfig``) serves every binding: the A2A 0.3 fields (``id``, ``url``,
``token``, ``authentication.schemes``/``credentials``) plus the version whose payloads the
webhook gets (``"0.3"``: the Task; ``"1.0"``: a ``StreamResponse``). A config without an id
takes the task's id, as the 0.3 SDK's server does, so setting it again replaces it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from pydantic import Field, field_validator

from gateway.errors import InvalidParamsError
from gateway.models.requests import _Model
from gateway.store.fields import CONFIG_ARTIFACTS, CONFIG_TENANT, CONFIG_USER
from gateway.validation import validated

__all__ = ["MAX_CONFIGS", "PushConfig", "Version", "read_config", "write_config"]

Version = Literal["0.3", "1.0"]
MAX_CONFIGS = 10
# A config id is a path segment of the REST bindings: URL-safe characters only.
_ID = re.compile(r"[A-Za-z0-9._~-]{1,128}")


class _Auth(_Model):
    schemes: list[str] = Field(default_factory=list, max_length=10)
    credentials: str | None = Field(default=None, max_length=4096)


class _Config(_Model):
    id: str | None = None
    url: str = Field(min_length=1, max_length=2048)
    token: str | None = Field(default=None, max_length=1024)
    authentication: _Auth | None = None

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str | None) -> str | None:
        if value is not None and value != "" and not _ID.fullmatch(value):
            raise ValueError("must be 1 to 128 of A-Z a-z 0-9 . _ ~ -")
        return value or None


@dataclass(frozen=True)
class PushConfig:
    id: str
    url: str
    token: str | None
    schemes: tuple[str, ...]
    credentials: str | None
    version: Version
    artifacts: bool  # also deliver artifact updates

    def stored(self, tenant: str, user: str) -> bytes:
        """The JSON the store keeps (the scripts read ``t``, ``u`` and ``a`` from it)."""
        record: dict[str, Any] = {"id": self.id, "url": self.url, "v": self.version}
        if self.token is not None:
            record["token"] = self.token
        if self.schemes or self.credentials is not None:
            record["auth"] = {"schemes": list(self.schemes), "credentials": self.credentials}
        record |= {CONFIG_TENANT: tenant, CONFIG_USER: user, CONFIG_ARTIFACTS: self.artifacts}
        return orjson.dumps(record)

    @classmethod
    def from_stored(cls, raw: bytes | str) -> PushConfig:
        record = orjson.loads(raw)
        auth = record.get("auth") or {}
        return cls(
            id=record["id"],
            url=record["url"],
            token=record.get("token"),
            schemes=tuple(auth.get("schemes") or ()),
            credentials=auth.get("credentials"),
            version=record.get("v", "0.3"),
            artifacts=bool(record.get(CONFIG_ARTIFACTS)),
        )


def read_config(
    raw: Any, task_id: str, version: Version, *, artifacts: bool, field: str = "config"
) -> PushConfig:
    """A config as a binding sends it: 0.3 (``authentication.schemes``) or 1.0
    (``authentication.scheme``), in camelCase or proto field names."""
    if not isinstance(raw, dict):
        raise InvalidParamsError(
            "A push notification config is an object",
            data={"errors": [{"field": field, "reason": "must be an object"}]},
        )
    body = dict(raw)
    auth = body.get("authentication")
    if isinstance(auth, dict) and "scheme" in auth:  # 1.0: one scheme
        scheme = auth.get("scheme")
        body["authentication"] = {
            "schemes": [scheme] if scheme else [],
            "credentials": auth.get("credentials") or None,
        }
    for key in ("tenant", "taskId", "task_id"):
        body.pop(key, None)
    config = validated(_Config, body, prefix=field)
    a = config.authentication
    return PushConfig(
        id=config.id or task_id,
        url=config.url,
        token=config.token or None,
        schemes=tuple(a.schemes) if a else (),
        credentials=a.credentials if a else None,
        version=version,
        artifacts=artifacts,
    )


def write_config(config: PushConfig, task_id: str, dialect: str) -> dict[str, Any]:
    """A config in a binding's spelling: ``"0.3"`` (a TaskPushNotificationConfig of the
    JSON-RPC and canonical bindings), ``"0.3proto"`` (the 0.3 proto-JSON resource, with its
    ``name``) or ``"1.0"``."""
    if dialect == "1.0":
        out: dict[str, Any] = {"id": config.id, "taskId": task_id, "url": config.url}
        if config.token:
            out["token"] = config.token
        if config.schemes:
            out["authentication"] = {"scheme": config.schemes[0]}
            if config.credentials:
                out["authentication"]["credentials"] = config.credentials
        return out
    inner: dict[str, Any] = {"id": config.id, "url": config.url}
    if config.token:
        inner["token"] = config.token
    if config.schemes or config.credentials:
        inner["authentication"] = {"schemes": list(config.schemes)}
        if config.credentials:
            inner["authentication"]["credentials"] = config.credentials
    if dialect == "0.3proto":
        return {
            "name": f"tasks/{task_id}/pushNotificationConfigs/{config.id}",
            "pushNotificationConfig": inner,
        }
    return {"taskId": task_id, "pushNotificationConfig": inner}
