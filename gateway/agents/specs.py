"""Registry entries: what a client registers, typed per agent type, and what it reads back.

Secrets (``apiKey``) are write-only: kept with the entry, never returned (the view says
``apiKeySet`` instead). ``apiKeyEnv`` names an environment variable of the gateway
holding the key, so the registry need not hold it at all — one the operator allows
(``key_env.py``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from gateway.agents.key_env import KeyEnvPolicy
from gateway.models import AgentView
from gateway.options.longterm import MemoryOptions
from gateway.validation import JsonInt

__all__ = [
    "AgentEntry",
    "AgentPatch",
    "AgentSpec",
    "EchoConfig",
    "OpenAIConfig",
    "RemoteConfig",
    "SkillSpec",
    "config_model",
]

AGENT_ID = r"^[a-z0-9][a-z0-9_-]{0,62}$"
ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


class _Strict(BaseModel):
    # Unknown fields are refused, and no value is coerced (no "5" for 5, no 1 for true).
    model_config = ConfigDict(extra="forbid", strict=True)


class SkillSpec(_Strict):
    id: str = Field(min_length=1, max_length=64)
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=2000)
    tags: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=32
    )
    examples: list[Annotated[str, Field(max_length=500)]] = Field(
        default_factory=list, max_length=16
    )


def _fields(exc: ValidationError) -> str:
    """The fields a validation error is about (pydantic's own text quotes the values)."""
    return ", ".join(sorted({".".join(map(str, e["loc"])) for e in exc.errors()}))


class _Config(_Strict):
    # Overrides of the long-term memory options for this agent (camelCase, see docs/memory.md).
    memory: dict[str, Any] | None = None
    # What a message continuing a task whose run is under way does (docs/api.md: run policy).
    runPolicy: Literal["enqueue", "reject", "interrupt"] | None = None

    @model_validator(mode="after")
    def _memory_options(self) -> _Config:
        if self.memory:
            try:
                MemoryOptions.model_validate(self.memory, strict=True)
                MemoryOptions().overridden(self.memory)
            except ValidationError as exc:
                # pydantic's own text would quote the values: name the fields only.
                raise ValueError(f"invalid memory options: {_fields(exc)}") from None
        return self


class _Keyed(_Config):
    apiKey: SecretStr | None = Field(default=None, max_length=4096)
    apiKeyEnv: str | None = Field(default=None, pattern=ENV_NAME)

    def key(self, env: KeyEnvPolicy) -> str | None:
        """The backend's key: the stored one, or the value of the named environment
        variable when ``env`` allows the name (None: no key)."""
        if self.apiKey is not None:
            return self.apiKey.get_secret_value()
        return env.read(self.apiKeyEnv)

    @model_validator(mode="after")
    def _one_key_source(self) -> _Keyed:
        if self.apiKey is not None and self.apiKeyEnv is not None:
            raise ValueError("give apiKey or apiKeyEnv, not both")
        return self


class EchoConfig(_Config):
    pass


class OpenAIConfig(_Keyed):
    baseUrl: str = Field(min_length=8, max_length=2000)
    model: str = Field(min_length=1, max_length=200)
    temperature: float | None = Field(default=None, ge=0, le=2)
    maxOutputTokens: JsonInt | None = Field(default=None, ge=1, le=200_000)
    timeoutSeconds: float = Field(default=60.0, gt=0, le=600)
    maxRetries: JsonInt = Field(default=2, ge=0, le=10)
    historyTokenBudget: JsonInt = Field(default=4000, ge=0, le=1_000_000)
    maxToolSteps: JsonInt = Field(default=4, ge=0, le=20)
    maxFileChars: JsonInt = Field(default=20_000, ge=0, le=1_000_000)
    # Stream the answer's tokens as artifact chunks (false: one artifact at the end).
    stream: bool = True


class RemoteConfig(_Keyed):
    cardUrl: str = Field(min_length=8, max_length=2000)
    blocking: bool = True  # false: send non-blocking and poll the remote task
    pollIntervalSeconds: float = Field(default=0.5, gt=0, le=60)
    timeoutSeconds: float = Field(default=300.0, gt=0, le=86_400)
    cardTtlSeconds: float = Field(default=300.0, ge=0, le=86_400)


_CONFIGS: dict[str, type[_Config]] = {
    "echo": EchoConfig,
    "openai": OpenAIConfig,
    "a2a-remote": RemoteConfig,
}


def config_model(agent_type: str) -> type[_Config]:
    """The typed config of an agent type."""
    return _CONFIGS[agent_type]


class AgentSpec(_Strict):
    """``POST /agents``."""

    id: str | None = Field(default=None, pattern=AGENT_ID)
    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=4000)
    systemPrompt: str = Field(default="", max_length=100_000)
    type: Literal["echo", "openai", "a2a-remote"]
    config: dict[str, Any] = Field(default_factory=dict)
    skills: list[SkillSpec] = Field(default_factory=list, max_length=64)

    def typed_config(self) -> _Config:
        return _CONFIGS[self.type].model_validate(self.config)


class AgentPatch(_Strict):
    """``PATCH /agents/{id}``: fields given replace the entry's; ``config`` is merged key by
    key (a ``null`` value removes a key), so a secret need not be sent again."""

    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=4000)
    systemPrompt: str | None = Field(default=None, max_length=100_000)
    type: Literal["echo", "openai", "a2a-remote"] | None = None
    config: dict[str, Any] | None = None
    skills: list[SkillSpec] | None = None

    @field_validator("*")
    @classmethod
    def _not_null(cls, value: object) -> object:
        # None is only the default ("not given"); a field given as null has no meaning.
        if value is None:
            raise ValueError("may be left out, but not null")
        return value


class AgentEntry(BaseModel):
    """A registered agent as stored (secrets included)."""

    id: str
    name: str
    description: str
    systemPrompt: str
    type: Literal["echo", "openai", "a2a-remote"]
    config: dict[str, Any]
    skills: list[SkillSpec]
    ephemeral: bool = False
    revision: int = 1
    createdAt: str
    updatedAt: str

    def typed_config(self) -> Any:
        # Checked strictly when written; entries stored before that rule still read.
        return _CONFIGS[self.type].model_validate(self.config, strict=False)

    def view(self) -> AgentView:
        """What clients read: the entry without secrets."""
        out = self.model_dump(mode="json")
        config = dict(out["config"])
        if "apiKey" in config:
            config.pop("apiKey")
            config["apiKeySet"] = True
        return AgentView(
            id=out["id"],
            name=out["name"],
            description=out["description"],
            type=out["type"],
            skills=out["skills"],
            built_in=False,
            system_prompt=out["systemPrompt"],
            config=config,
            ephemeral=out["ephemeral"],
            revision=out["revision"],
            created_at=out["createdAt"],
            updated_at=out["updatedAt"],
        )
