"""The use cases a served process's bindings call, built over its runtime from settings."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.engine.hand_off import RunHandOff
from gateway.runtime.api_keys import key_service
from gateway.runtime.runtime import Runtime
from gateway.service.agents import AgentService
from gateway.service.audit import AuditService
from gateway.service.contexts import ContextService
from gateway.service.keys import KeyService
from gateway.service.memories import MemoryService
from gateway.service.messages import MessageService
from gateway.service.push import PushService
from gateway.service.stream_limits import StreamLimits
from gateway.service.streams import StreamService
from gateway.service.tasks import TaskService
from gateway.settings import Settings

__all__ = ["Services"]


def _messages(settings: Settings, runtime: Runtime, push: PushService | None) -> MessageService:
    """Sends: their quotas, the run hand-off, webhooks and long-term memory."""
    return MessageService(
        runtime.store,
        runtime.agents,
        RunHandOff(runtime.store, runtime.queue, settings.run_policy),
        runtime.events,
        settings.blocking_timeout_seconds,
        embedding=runtime.embedder is not None,
        quotas=(
            settings.quota_messages_per_context,
            settings.quota_bytes_per_context,
            settings.quota_contexts_per_user,
            settings.quota_running_tasks_per_user,
        ),
        push=push,
        longterm=runtime.longterm,
        client_context_ids=settings.client_context_ids == "accept",
    )


def _streams(settings: Settings, runtime: Runtime, messages: MessageService) -> StreamService:
    return StreamService(
        runtime.store,
        runtime.events,
        messages,
        settings.sse_keepalive_seconds,
        tail=runtime.stores.tail,
        limits=StreamLimits(settings.streams_per_principal, settings.streams_per_process),
        buffer_bytes=settings.stream_buffer_bytes,
    )


@dataclass
class Services:
    messages: MessageService
    tasks: TaskService
    contexts: ContextService
    registry: AgentService
    streams: StreamService
    push: PushService
    memories: MemoryService
    keys: KeyService | None  # None: no GATEWAY_API_KEY_SECRET, no managed keys
    audit: AuditService | None  # None: GATEWAY_AUDIT is off

    @classmethod
    def build(cls, settings: Settings, runtime: Runtime) -> Services:
        stores = runtime.stores
        push = PushService(
            runtime.store, stores.push_configs, runtime.http.push_policy, settings.push_artifacts
        )
        messages = _messages(settings, runtime, push)
        forget = settings.cortadel.enabled and settings.cortadel.scrub
        return cls(
            messages=messages,
            tasks=TaskService(runtime.store),
            contexts=ContextService(runtime.store, stores.job_streams, forget_memories=forget),
            registry=AgentService(runtime.agents, runtime.http.allowlist),
            streams=_streams(settings, runtime, messages),
            push=push,
            memories=MemoryService(runtime.cortadel, runtime.longterm, runtime.store),
            keys=key_service(settings, stores.api_keys, runtime.store),
            audit=AuditService(stores.audit) if stores.audit is not None else None,
        )
