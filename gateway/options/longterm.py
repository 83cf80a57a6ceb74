"""Long-term memory configuration: deployment defaults and per-agent overrides.

The recall and store options are declared once (``_OptionFields``). Deployments set
them as ``GATEWAY_CORTADEL_<FIELD>`` variables (``CortadelSettings``); an agent's
config may override any of them in camelCase (``MemoryOptions``, e.g. ``topK``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["DEFAULT_HEADER", "CortadelSettings", "MemoryOptions"]

DEFAULT_HEADER = "[Recalled memories]"
_TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class _OptionFields(BaseModel):
    top_k: int = Field(default=5, ge=1, le=50)
    search_mode: Literal["hybrid", "text", "vector"] = "hybrid"
    rerank: Literal["cross_encoder"] | None = None
    memory_type: Literal["episodic", "semantic", "procedural"] | None = None
    min_score: float | None = None
    scope_recall_to_session: bool = False
    inject_as: Literal["message", "instructions"] = "message"
    memory_header: str = Field(default=DEFAULT_HEADER, min_length=1, max_length=200)
    dedupe_across_turns: bool = True
    max_remembered_ids: int = Field(default=256, ge=1, le=10_000)
    retrieve: bool = True
    store_turns: bool = True
    # DataParts (structured data: ids, vitals) in recall queries and stored turns.
    include_data: bool = False
    # A blocking send returns once its turn is stored in Cortadel (within timeoutSeconds).
    await_persist: bool = False
    # The model may call the memory tools (an openai agent; the MCP endpoint), by these names.
    tools: bool = False
    search_tool_name: str = Field(default="search_long_term_memory", pattern=_TOOL_NAME)
    add_tool_name: str = Field(default="add_memories", pattern=_TOOL_NAME)
    is_agent_memory: bool = False
    tags: Annotated[list[str], NoDecode] = Field(default_factory=list)
    project: str | None = None
    app_name: str = "gateway"
    recall_timeout_ms: int = Field(default=1500, ge=10, le=60_000)
    strict: bool = False

    @field_validator("tags", mode="before")
    @classmethod
    def _split_tags(cls, value: object) -> object:
        if isinstance(value, str):
            return [t.strip() for t in value.split(",") if t.strip()]
        return value

    @model_validator(mode="after")
    def _tool_names_apart(self) -> _OptionFields:
        names = {self.search_tool_name, self.add_tool_name}
        if len(names) < 2 or "search_memory" in names:
            raise ValueError("the memory tools need two names, neither search_memory")
        return self

    @field_validator("memory_header")
    @classmethod
    def _one_line(cls, value: str) -> str:
        if "\n" in value or not value.strip():
            raise ValueError("memoryHeader is one non-blank line")
        return value.strip()


class MemoryOptions(_OptionFields):
    """The options in effect for one agent (camelCase in agent config)."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    def overridden(self, overrides: Mapping[str, Any] | None) -> MemoryOptions:
        """These options with an agent's overrides applied (validated)."""
        if not overrides:
            return self
        merged = self.model_dump() | MemoryOptions.model_validate(dict(overrides)).model_dump(
            exclude_unset=True
        )
        return MemoryOptions.model_validate(merged)


class CortadelSettings(_OptionFields, BaseSettings):
    """``GATEWAY_CORTADEL_*``: where Cortadel is, how to authenticate, and the defaults."""

    model_config = SettingsConfigDict(env_prefix="GATEWAY_CORTADEL_", extra="ignore")

    url: str | None = None
    api_key: SecretStr | None = None
    # Per-tenant keys, JSON {"tenant": "key"}; a tenant without one uses ``api_key``.
    tenant_keys: Annotated[dict[str, SecretStr], NoDecode] = Field(default_factory=dict)
    # How gateway principals become Cortadel user ids: "plain" sends "<tenant>:<user>"
    # (each percent-encoded, so no two principals collide); "hashed" sends an HMAC of it.
    user_ids: Literal["plain", "hashed"] = "plain"
    user_id_secret: SecretStr | None = None
    # What a context without a subject recalls: "context", only what its own turns stored
    # (the search names it as the session); "user", all of the user's memories without a
    # subject (for apps whose user is the subject: patient-facing apps).
    subjectless_recall: Literal["context", "user"] = "context"
    # Check at start that a key does not pin every request to one Cortadel user.
    probe: bool = True
    scrub: bool = True
    timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    backoff_max_seconds: float = Field(default=30.0, gt=0, le=3600)
    outbox_batch: int = Field(default=64, ge=1, le=500)

    @field_validator("tenant_keys", mode="before")
    @classmethod
    def _parse_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return orjson.loads(value) if value.strip() else {}
        return value

    @field_validator("user_id_secret")
    @classmethod
    def _secret_length(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 16:
            raise ValueError("the user id secret must be at least 16 characters")
        return value

    @model_validator(mode="after")
    def _hashing_needs_a_secret(self) -> CortadelSettings:
        if self.user_ids == "hashed" and self.user_id_secret is None:
            raise ValueError(
                "GATEWAY_CORTADEL_USER_IDS=hashed needs GATEWAY_CORTADEL_USER_ID_SECRET"
            )
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    def options(self) -> MemoryOptions:
        return MemoryOptions.model_validate(
            self.model_dump(include=set(_OptionFields.model_fields))
        )

    def key_for(self, tenant: str) -> str | None:
        key = self.tenant_keys.get(tenant) or self.api_key
        return key.get_secret_value() if key is not None else None
