"""What the routes share: settings, the store, the services."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from gateway.agents.registry import AgentRegistry
from gateway.principal import Principal
from gateway.push.signing import SigningKeys
from gateway.service.agents import AgentService
from gateway.service.audit import AuditService
from gateway.service.contexts import ContextService
from gateway.service.keys import KeyService
from gateway.service.memories import MemoryService
from gateway.service.messages import MessageService
from gateway.service.push import PushService
from gateway.service.search import SearchService
from gateway.service.streams import StreamService
from gateway.service.tasks import TaskService
from gateway.settings import Settings
from gateway.store.redis_store import Store

__all__ = ["AppState", "app_state", "principal_of"]


@dataclass
class AppState:
    settings: Settings
    store: Store
    agents: AgentRegistry
    messages: MessageService
    tasks: TaskService
    contexts: ContextService
    search: SearchService
    registry: AgentService
    streams: StreamService
    keys: KeyService | None = None
    audit: AuditService | None = None
    push: PushService | None = None  # None: push notifications are not offered
    signing_keys: SigningKeys | None = None  # sign the agent cards (None: unsigned)
    redis_embedded: bool = False  # /healthz fails while the embedded Redis does not answer
    memories: MemoryService = field(default_factory=lambda: MemoryService(None))


def app_state(request: Request) -> AppState:
    """The app's shared state, as a route reads it."""
    state: AppState = request.app.state.gateway
    return state


def principal_of(request: Request) -> Principal:
    """Who is calling: the principal authentication put in the request's scope."""
    principal: Principal = request.scope["state"]["principal"]
    return principal
