"""The agent registry's use cases: list, register, read, change, delete.

Everyone reads their tenant's agents; writes need an ``admin`` principal. Entries are
validated whole (typed config per type, URLs against the outbound allowlist, the
environment variable a key is read from) before anything is stored. A variable the
operator does not allow (``agents/key_env.py``) is refused exactly as an unset one: the
answer does not tell which names exist.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.agents.base import Agent
from gateway.agents.registry import AgentRegistry
from gateway.agents.specs import AgentEntry, AgentPatch, AgentSpec, config_model
from gateway.clock import iso_from_ms, now_ms
from gateway.errors import (
    AgentExistsError,
    AgentNotFoundError,
    AgentReadOnlyError,
    ForbiddenError,
    GatewayError,
    InvalidParamsError,
)
from gateway.models import AgentList, AgentView
from gateway.outbound import Allowlist
from gateway.principal import Principal
from gateway.validation import validated

__all__ = ["AgentService"]

_URL_FIELDS = {"openai": "baseUrl", "a2a-remote": "cardUrl"}


def _builtin_view(agent: Agent) -> AgentView:
    return AgentView(
        id=agent.id,
        name=agent.name,
        description=agent.description,
        type="echo" if agent.id == "echo" else "plugin",
        skills=[s.to_json() for s in agent.skills],
        built_in=True,
    )


def _new_id(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:40] or "agent"
    return f"{slug}-{uuid.uuid4().hex[:6]}"


@dataclass
class AgentService:
    registry: AgentRegistry
    allowlist: Allowlist

    @staticmethod
    def _admin(principal: Principal) -> None:
        if "admin" not in principal.roles:
            raise ForbiddenError("Changing the agent registry needs an admin API key")

    def _check(self, entry: AgentEntry) -> None:
        """The entry as a whole: typed config, allowed URL, key environment variable."""
        typed: Any = validated(config_model(entry.type), entry.config, prefix="config")
        field = _URL_FIELDS.get(entry.type)
        if field is not None:
            self.allowlist.validate(getattr(typed, field), f"config.{field}")
        env = getattr(typed, "apiKeyEnv", None)
        if env is not None and self.registry.key_env.read(env) is None:
            raise InvalidParamsError(
                "config.apiKeyEnv names no environment variable the gateway may read",
                data={
                    "errors": [{"field": "config.apiKeyEnv", "reason": "not set or not allowed"}]
                },
            )

    async def list(self, principal: Principal) -> AgentList:
        items = [_builtin_view(a) for a in self.registry.builtins()]
        raw = await self.registry.store.all(principal.tenant)
        items += [AgentEntry.model_validate(orjson.loads(r)).view() for r in raw]
        return AgentList(items, len(items))

    async def read(self, principal: Principal, agent_id: str) -> AgentView:
        builtin = self.registry.builtin(agent_id)
        if builtin is not None:
            return _builtin_view(builtin)
        entry = await self.registry.entry(principal.tenant, agent_id)
        if entry is None:
            raise AgentNotFoundError()
        return entry.view()

    async def create(self, principal: Principal, spec: AgentSpec, ephemeral: bool) -> AgentView:
        self._admin(principal)
        agent_id = spec.id or _new_id(spec.name)
        if self.registry.builtin(agent_id) is not None:
            raise AgentExistsError()
        stamp = iso_from_ms(now_ms())
        entry = AgentEntry(
            **spec.model_dump(exclude={"id"}),
            id=agent_id,
            ephemeral=ephemeral,
            createdAt=stamp,
            updatedAt=stamp,
        )
        self._check(entry)
        if not await self.registry.store.create(
            principal.tenant, agent_id, _dumps(entry), ephemeral
        ):
            raise AgentExistsError()
        return entry.view()

    async def patch(self, principal: Principal, agent_id: str, patch: AgentPatch) -> AgentView:
        self._admin(principal)
        if self.registry.builtin(agent_id) is not None:
            raise AgentReadOnlyError()
        for _ in range(5):  # optimistic: re-read when another writer got there first
            entry = await self.registry.entry(principal.tenant, agent_id)
            if entry is None:
                raise AgentNotFoundError()
            changes = patch.model_dump(exclude_unset=True, exclude={"config"})
            config = dict(entry.config)
            for key, value in (patch.config or {}).items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
            updated = AgentEntry.model_validate(
                {
                    **entry.model_dump(),
                    **changes,
                    "config": config,
                    "revision": entry.revision + 1,
                    "updatedAt": iso_from_ms(now_ms()),
                }
            )
            self._check(updated)
            outcome = await self.registry.store.replace(
                principal.tenant, agent_id, entry.revision, _dumps(updated)
            )
            if outcome == "gone":
                raise AgentNotFoundError()
            if outcome == "ok":
                self.registry.forget(principal.tenant, agent_id)
                return updated.view()
        raise GatewayError("The agent changed too often to update; retry")

    async def delete(self, principal: Principal, agent_id: str) -> None:
        self._admin(principal)
        if self.registry.builtin(agent_id) is not None:
            raise AgentReadOnlyError()
        if not await self.registry.store.delete(principal.tenant, agent_id):
            raise AgentNotFoundError()
        self.registry.forget(principal.tenant, agent_id)


def _dumps(entry: AgentEntry) -> bytes:
    return orjson.dumps(entry.model_dump(mode="json"))
