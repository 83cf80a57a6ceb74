"""Push notification configs of a principal's tasks: set, get, list, delete — and the
config a send carries. Every webhook URL passes the webhook policy here (its scheme, host
and port: ``push/destinations.py``) before it is stored; the deliverer checks it again on
each request, and the addresses its name resolves to on each connection."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import InvalidParamsError, TaskNotFoundError
from gateway.principal import Principal
from gateway.push.configs import MAX_CONFIGS, PushConfig, Version, read_config
from gateway.push.destinations import WebhookPolicy
from gateway.store.push_store import PushStore
from gateway.store.redis_store import Store

__all__ = ["PushService"]


def _config_not_found() -> TaskNotFoundError:
    return TaskNotFoundError("No such push notification config for this task")


@dataclass
class PushService:
    store: Store
    configs: PushStore
    policy: WebhookPolicy
    artifacts: bool = False  # configs also get artifact updates (GATEWAY_PUSH_ARTIFACTS)

    async def _context_of(self, principal: Principal, task_id: str) -> str:
        context_id = await self.store.task_context(principal, task_id)
        if context_id is None:
            raise TaskNotFoundError()
        return context_id

    async def checked(self, raw: Any, task_id: str, version: Version, field: str) -> PushConfig:
        """A config read from a request, its URL allowed."""
        config = read_config(raw, task_id, version, artifacts=self.artifacts, field=field)
        self.policy.validate(config.url, f"{field}.url")
        return config

    async def for_send(
        self, principal: Principal, task_id: str, raw: Any, version: Version
    ) -> bytes:
        """What the send script stores for a send's ``pushNotificationConfig``."""
        field = "configuration.pushNotificationConfig"
        config = await self.checked(raw, task_id, version, field)
        return config.stored(principal.tenant, principal.user)

    async def set(
        self, principal: Principal, task_id: str, raw: Any, version: Version
    ) -> PushConfig:
        context_id = await self._context_of(principal, task_id)
        config = await self.checked(raw, task_id, version, "pushNotificationConfig")
        outcome = await self.configs.write(
            principal,
            context_id,
            task_id,
            config.id,
            config.stored(principal.tenant, principal.user),
            MAX_CONFIGS,
        )
        if outcome == "notask":
            raise TaskNotFoundError()
        if outcome == "full":
            raise InvalidParamsError(
                f"A task takes at most {MAX_CONFIGS} push notification configs"
            )
        return config

    async def list(self, principal: Principal, task_id: str) -> list[PushConfig]:
        context_id = await self._context_of(principal, task_id)
        found = await self.configs.read(principal, context_id, task_id)
        if found is None:
            raise TaskNotFoundError()
        return [PushConfig.from_stored(raw) for raw in found.values()]

    async def get(self, principal: Principal, task_id: str, config_id: str | None) -> PushConfig:
        context_id = await self._context_of(principal, task_id)
        found = await self.configs.read(principal, context_id, task_id)
        if found is None:
            raise TaskNotFoundError()
        raw = found.get(config_id or task_id)
        if raw is None:
            raise _config_not_found()
        return PushConfig.from_stored(raw)

    async def delete(self, principal: Principal, task_id: str, config_id: str) -> None:
        """Idempotent: deleting a config the task does not have succeeds."""
        context_id = await self._context_of(principal, task_id)
        outcome = await self.configs.write(
            principal, context_id, task_id, config_id, b"", MAX_CONFIGS
        )
        if outcome == "notask":
            raise TaskNotFoundError()
