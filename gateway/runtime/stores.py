"""Every store over a process's Redis connections, built from settings: the gateway's state
(``Store``), the job streams, and the stores beside them (agents, API keys, audit, rate
limits, push configs, the key registry, the event logs' reader)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gateway import tracing
from gateway.runtime.connections import Connections, consumer_name
from gateway.settings import Settings
from gateway.store.agents_store import AgentStore
from gateway.store.apikeys_store import ApiKeyStore
from gateway.store.audit_store import AuditStore
from gateway.store.disk_rewrite import DiskRewrite
from gateway.store.event_tail import EventTail
from gateway.store.jobs import JobStore
from gateway.store.key_registry import KeyRegistry
from gateway.store.keys import (
    EMBEDS,
    EMBEDS_DEAD,
    EMBEDS_GROUP,
    OUTBOX,
    OUTBOX_DEAD,
    OUTBOX_GROUP,
    PUSH,
    PUSH_DEAD,
    PUSH_GROUP,
)
from gateway.store.lua import Scripts
from gateway.store.push_store import PushStore
from gateway.store.rate_store import RateStore
from gateway.store.redis_store import Store
from gateway.store.sealing import Sealer, sealer_for

__all__ = ["Stores", "api_key_store", "audit_store", "sealer_of"]

log = logging.getLogger("gateway")


def sealer_of(settings: Settings) -> Sealer:
    """The store's sealer (``sealing.sealer_for``), with a warning when encryption is off."""
    if settings.encryption == "off":
        log.warning(
            "encryption at rest is OFF (GATEWAY_ENCRYPTION=off): message content is stored "
            "in clear in Redis and its files"
        )
    return sealer_for(settings)


def audit_store(settings: Settings, connections: Connections) -> AuditStore | None:
    """The audit trail (None: ``GATEWAY_AUDIT`` is off)."""
    if not settings.audit:
        return None
    return AuditStore(
        connections.client,
        settings.audit_max_entries,
        settings.audit_max_age_seconds,
        hot=connections.hot,
    )


def api_key_store(connections: Connections, scripts: Scripts | None = None) -> ApiKeyStore:
    """The managed API keys, with ``scripts`` already registered on the client if given."""
    return ApiKeyStore(connections.client, scripts or Scripts.register(connections.client))


def _state_store(settings: Settings, connections: Connections) -> Store:
    """The gateway's state: sealed as the settings say, its files rewritten after a scrub
    when ``GATEWAY_SCRUB_REWRITE`` is on (not on a cluster), its commands traced."""
    client, cluster = connections.client, connections.target.cluster
    store = Store(
        client,
        settings.context_ttl_seconds,
        cluster=cluster,
        sealer=sealer_of(settings),
        hot=connections.hot,
    )
    if settings.scrub_rewrite == "on" and cluster:
        log.warning("GATEWAY_SCRUB_REWRITE=on is ignored on a Redis Cluster (see README)")
    elif settings.scrub_rewrite == "on":
        store.disk_rewrite = DiskRewrite(client, settings.scrub_rewrite_seconds)
    tracing.instrument_redis(client, store.scripts)
    store.push_artifacts = settings.push_artifacts
    store.push_lease_ms = int(settings.job_lease_seconds * 1000)
    return store


def _job_stream(settings: Settings, connections: Connections, *names: str) -> JobStore:
    """A job stream (no ``names``: the runs'), its dead letters kept as the settings say."""
    return JobStore(
        connections.client,
        *names,
        dead_max_entries=settings.dead_letter_max_entries,
        dead_max_age_seconds=settings.dead_letter_max_age_seconds,
        hot=connections.hot,
    )


@dataclass
class Stores:
    store: Store
    # The one reader of the task event logs this process's streams follow.
    tail: EventTail
    jobs: JobStore  # the runs
    embeds: JobStore
    outbox: JobStore  # the Cortadel outbox
    push: JobStore  # webhook deliveries
    agents: AgentStore
    audit: AuditStore | None
    api_keys: ApiKeyStore
    rates: RateStore
    push_configs: PushStore
    key_registry: KeyRegistry  # this process among those sealing and opening the store's data

    @property
    def job_streams(self) -> tuple[JobStore, ...]:
        """Every job stream: a context's scrub removes its dead letters from each."""
        return (self.jobs, self.embeds, self.outbox, self.push)

    @classmethod
    def build(cls, settings: Settings, connections: Connections) -> Stores:
        store = _state_store(settings, connections)
        client, target = connections.client, connections.target
        return cls(
            store=store,
            tail=EventTail(
                target.url, client if target.cluster else None, timeout=connections.timeout
            ),
            jobs=_job_stream(settings, connections),
            embeds=_job_stream(settings, connections, EMBEDS, EMBEDS_GROUP, EMBEDS_DEAD),
            outbox=_job_stream(settings, connections, OUTBOX, OUTBOX_GROUP, OUTBOX_DEAD),
            push=_job_stream(settings, connections, PUSH, PUSH_GROUP, PUSH_DEAD),
            agents=AgentStore(client, settings.context_ttl_seconds, store.sealer),
            audit=audit_store(settings, connections),
            api_keys=api_key_store(connections, store.scripts),
            rates=RateStore(store.scripts, store.hot),
            push_configs=PushStore(store),
            key_registry=KeyRegistry(client, store.sealer, consumer_name()),
        )
