"""Typed configuration, read once from the environment at start-up.

Every setting is an environment variable with the ``GATEWAY_`` prefix, except the
Redis URL, which also answers to the conventional ``REDIS_URL``. Invalid values
fail fast: ``configuration.load_settings`` reports each by its variable, never its value.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

import orjson
from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gateway.options.identity import JwtIssuer
from gateway.options.keyring import Keyring
from gateway.options.longterm import CortadelSettings
from gateway.ratelimit import Rate, TenantLimits

__all__ = ["ApiKeyEntry", "Settings"]

THIRTY_DAYS = 30 * 24 * 3600


def _comma_list(value: object) -> object:
    """A comma-separated environment variable's items."""
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return value


_HOST_NAME = re.compile(
    r"(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?",
    re.IGNORECASE,
)


def _host_patterns(value: list[str]) -> list[str]:
    """``host[:port]`` patterns: a host name (``*.`` for any subdomain), an IP address or a
    CIDR block, and a port, if any, that is a port or ``*``."""
    for pattern in value:
        if pattern.startswith("["):
            host, _, port = pattern[1:].partition("]")
        else:
            host, _, port = pattern.partition(":") if pattern.count(":") == 1 else (pattern, "", "")
        if port:
            number = port.removeprefix(":") if pattern.startswith("[") else port
            if number not in ("", "*") and not (number.isdigit() and 0 < int(number) < 65536):
                raise ValueError("a pattern's port must be a number from 1 to 65535 or *")
        try:
            ipaddress.ip_network(host, strict=False)
        except ValueError:
            if not _HOST_NAME.fullmatch(host):
                raise ValueError(
                    "a pattern's host must be a host name (*. for any subdomain), an IP "
                    "address or a CIDR block"
                ) from None
    return value


def _host_ports(value: list[str]) -> list[str]:
    """``host:port`` addresses (``[v6]:port`` for an IPv6 one)."""
    for address in value:
        host, _, port = address.rpartition(":")
        if not host.strip("[]") or not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError("each address must be host:port, the port from 1 to 65535")
    return value


class ApiKeyEntry(BaseModel):
    """The principal an API key stands for."""

    tenant: str = Field(min_length=1, max_length=128)
    user: str = Field(min_length=1, max_length=256)
    roles: list[str] = Field(default_factory=list)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore")

    redis_url: str | None = Field(
        default=None, validation_alias=AliasChoices("REDIS_URL", "GATEWAY_REDIS_URL")
    )
    redis_cluster: bool = False
    redis_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    # How long start-up waits for Redis to answer before the process gives up (0: no wait).
    redis_startup_seconds: float = Field(default=30.0, ge=0, le=3600)
    # Redis Sentinel (docs/operations.md): the Sentinels' host:port, the primary's name.
    redis_sentinels: Annotated[
        list[str], NoDecode, BeforeValidator(_comma_list), AfterValidator(_host_ports)
    ] = Field(default_factory=list)
    redis_sentinel_master: str = Field(default="mymaster", min_length=1)
    redis_sentinel_password: SecretStr | None = None
    redis_sentinel_tls: bool = False
    # Writes wait until this many replicas have them (WAIT), within the timeout, or fail.
    redis_min_replicas_ack: int = Field(default=0, ge=0, le=16)
    redis_replica_ack_timeout_ms: int = Field(default=1000, ge=1, le=60_000)

    @model_validator(mode="after")
    def _sentinels_or_cluster(self) -> Settings:
        scheme = (self.redis_url or "").partition("://")[0]
        if self.redis_sentinels and (self.redis_cluster or scheme.endswith("+cluster")):
            raise ValueError(
                "GATEWAY_REDIS_SENTINELS: not with a Redis Cluster (REDIS_URL, "
                "GATEWAY_REDIS_CLUSTER), which has no Sentinels"
            )
        return self

    data_dir: str = ".data"
    public_url: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # The gRPC binding (gateway/grpcapi): its port (unset: not served), and TLS from a PEM
    # certificate chain and key (both or neither; unset: plaintext).
    grpc_port: int | None = Field(default=None, ge=0, le=65535)
    grpc_tls_cert: str | None = None
    grpc_tls_key: str | None = None
    context_ttl_seconds: int = Field(default=THIRTY_DAYS, ge=1)
    blocking_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    # Streams (SSE): a keep-alive comment after this long without an event.
    sse_keepalive_seconds: float = Field(default=15.0, gt=0, le=300)
    # Open streams a principal may hold in one process, and the process in all: a new one
    # over either is refused (429 / 503 with Retry-After), open ones go on. A stream whose
    # client lags this many bytes of events behind is ended (it resumes by Last-Event-ID).
    streams_per_principal: int = Field(default=100, ge=1, le=100_000)
    streams_per_process: int = Field(default=2000, ge=1, le=1_000_000)
    stream_buffer_bytes: int = Field(default=4 * 1024 * 1024, ge=64 * 1024, le=1 << 30)
    api_keys: Annotated[dict[str, ApiKeyEntry], NoDecode] = Field(default_factory=dict)
    # Identity providers whose bearer tokens are accepted (options/identity.py), the clock
    # skew allowed on exp/nbf, how long their keys are cached and how often at most they
    # are refetched for a key id not seen yet.
    jwt_issuers: Annotated[list[JwtIssuer], NoDecode] = Field(default_factory=list)
    jwt_leeway_seconds: float = Field(default=30.0, ge=0, le=600)
    jwks_cache_seconds: float = Field(default=300.0, gt=0, le=86_400)
    jwks_min_refetch_seconds: float = Field(default=10.0, ge=0, le=3600)
    # Rate limits (ratelimit.py), "<requests>/<seconds>": per principal and per tenant (unset:
    # none), a tenant's own (JSON {"<tenant>": {"user": "..", "tenant": ".."}}), and failed
    # authentications per client address.
    rate_limit_user: Annotated[Rate | None, NoDecode] = None
    rate_limit_tenant: Annotated[Rate | None, NoDecode] = None
    rate_limit_tenants: Annotated[dict[str, TenantLimits], NoDecode] = Field(default_factory=dict)
    auth_failure_limit: Annotated[Rate | None, NoDecode] = Rate(100, 60)
    # The proxies (IPs or CIDRs) whose X-Forwarded-For / X-Forwarded-Proto are believed
    # (gateway serve); empty: none, the peer of the connection is the client everywhere
    # (audit trail, failed-authentication limits).
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def _parse_proxies(cls, value: object) -> object:
        if isinstance(value, str):
            value = [p.strip() for p in value.split(",") if p.strip()]
        if isinstance(value, list):
            for item in value:
                try:
                    ipaddress.ip_network(str(item), strict=False)
                except ValueError:
                    problem = "each entry is an IP address or a CIDR, e.g. 10.0.0.0/8"
                    raise ValueError(problem) from None
        return value

    # Managed API keys (api_keys.py): the server's HMAC secret turns them on; a key's
    # record is reused this long by each process (a revoked key is refused within it).
    api_key_secret: SecretStr | None = Field(default=None, min_length=16)
    api_key_cache_seconds: float = Field(default=1.0, ge=0, le=2)
    # The audit trail (audit/): on by default; each tenant's stream keeps this many entries
    # and this much time; optionally mirrored as JSON lines to "stdout" or a file.
    audit: bool = True
    audit_max_entries: int = Field(default=100_000, ge=100, le=100_000_000)
    audit_max_age_seconds: float = Field(default=90 * 24 * 3600, gt=0)
    audit_mirror: str | None = None
    # Quotas (0: none), enforced atomically by the send script: messages and stored bytes
    # per context; contexts and tasks with a run queued or under way, per user.
    quota_messages_per_context: int = Field(default=0, ge=0, le=10_000_000)
    quota_bytes_per_context: int = Field(default=0, ge=0)
    quota_contexts_per_user: int = Field(default=0, ge=0, le=10_000_000)
    quota_running_tasks_per_user: int = Field(default=0, ge=0, le=1_000_000)
    agent_plugins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # host[:port] patterns registered agents may reach (see outbound.py); empty: only the
    # hosts of this configuration (embedder, Cortadel).
    outbound_allowlist: Annotated[
        list[str], NoDecode, BeforeValidator(_comma_list), AfterValidator(_host_patterns)
    ] = Field(default_factory=list)
    agent_cache_seconds: float = Field(default=2.0, ge=0, le=300)
    # The environment variables a registered agent's apiKeyEnv may name (agents/key_env.py):
    # those starting with the prefix (empty: none) and those listed (comma-separated); never
    # a variable of the gateway's own configuration (GATEWAY_*, REDIS_*, OTEL_*).
    agent_key_env_prefix: str = Field(
        default="AGENT_SECRET_", pattern=r"^([A-Za-z_][A-Za-z0-9_]{0,63})?$"
    )
    agent_key_env_names: Annotated[
        list[str],
        NoDecode,
        BeforeValidator(
            lambda v: [n.strip() for n in v.split(",") if n.strip()] if isinstance(v, str) else v
        ),
    ] = Field(default_factory=list)
    default_agent: str = "echo"
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    # What a client may hold open before it is even authenticated (gateway serve).
    max_header_bytes: int = Field(default=16 * 1024, ge=1024, le=1024 * 1024)
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    body_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Host names answered besides loopback ones (http/browser.py); with API keys, any
    # host is answered unless this names them.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Origins a browser page may call from (CORS); empty: none.
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    runner_concurrency: int = Field(default=64, ge=1, le=10_000)
    queue: Literal["stream", "memory"] = "stream"
    workers: bool = True
    # gateway serve: this many server processes on one port (SO_REUSEPORT), one per core.
    processes: int = Field(default=1, ge=1, le=256)
    job_lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    job_max_attempts: int = Field(default=5, ge=1, le=100)
    prune_interval_seconds: float = Field(default=3600.0, gt=0)
    # Dead letters (of runs, embeddings, outbox jobs) are kept up to this many per stream,
    # and this long; trimmed on every prune.
    dead_letter_max_entries: int = Field(default=10_000, ge=1, le=10_000_000)
    dead_letter_max_age_seconds: float = Field(default=7 * 24 * 3600, gt=0)
    redis_appendfsync: Literal["always", "everysec", "no"] = "everysec"
    # After a scrub, Redis rewrites its files (AOF, and RDB if on) within this many seconds
    # so the scrubbed content leaves the disk (store/disk_rewrite.py). auto: with the
    # embedded Redis only; on: with any standalone Redis that allows BGREWRITEAOF.
    scrub_rewrite: Literal["auto", "on", "off"] = "auto"
    scrub_rewrite_seconds: float = Field(default=300.0, gt=0, le=3600)
    # Content at rest (store/sealing.py): sealed with AES-256-GCM unless "off". Keys: a JSON
    # object key id -> base64 key (the first current) or the path of a file holding one;
    # unset with the embedded Redis, a key generated into the data directory.
    encryption: Literal["on", "off"] = "on"
    encryption_keys: SecretStr | None = None
    agent_context_messages: int = Field(default=100, ge=0, le=1000)
    working_after_ms: int = Field(default=20, ge=0, le=60_000)
    # A message that continues a task whose run is under way: waits its turn, is refused
    # (409 TaskBusyError) or interrupts that run. Agents and messages may choose their own.
    run_policy: Literal["enqueue", "reject", "interrupt"] = "enqueue"
    # A send naming a contextId the user does not have opens it (``accept``) or is refused
    # with 404 ContextNotFoundError (``refuse``: server-generated context ids only).
    client_context_ids: Literal["accept", "refuse"] = "accept"
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    embedder: Literal["wordllama", "hashing", "openai", "none"] = "wordllama"
    embedder_url: str | None = None
    embedder_model: str = "text-embedding-3-small"
    embedder_api_key: SecretStr | None = None
    embedder_dimensions: int | None = Field(default=None, ge=8, le=8192)
    embedder_batch_size: int = Field(default=64, ge=1, le=2048)
    embedder_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    embedder_backoff_max_seconds: float = Field(default=30.0, gt=0, le=3600)
    embedder_max_chars: int = Field(default=8000, ge=100, le=1_000_000)
    # How long the indexer lets a batch gather once a job is there: more messages per
    # embedding pass and vectors script, that much later searchable.
    embedder_linger_ms: int = Field(default=20, ge=0, le=1000)
    # gateway serve embeds user messages in its background loop (its indexer); false leaves
    # every message to `gateway worker` processes (their indexers), off its CPU.
    serve_embeds: bool = True
    # The longest a search with consistency=wait waits for the context's pending messages to
    # be embedded; past it, it answers with what is embedded.
    search_wait_seconds: float = Field(default=2.0, gt=0, le=60)
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # Tracing (see trace_export.py): an OTLP collector's base URL (over HTTP, spans go to
    # <url>/v1/traces); unset, the standard OTEL_* variables decide, and with no endpoint
    # nor exporter named nothing is traced. The ratio samples new traces (unset: the
    # standard OTEL_TRACES_SAMPLER's, else all).
    otlp_endpoint: str | None = None
    trace_sample_ratio: float | None = Field(default=None, ge=0, le=1)
    # Push notifications (gateway/push): how long an event is retried before it is
    # dead-lettered, the first and the longest pause between attempts (doubling, with
    # jitter), a request's timeout, deliveries in flight per process and per webhook
    # origin (scheme, host, port: a slow webhook takes no more), the PEM files of the
    # keys that sign webhook requests (the first signs, all are published; none: one key is
    # generated and shared through Redis), and whether artifact updates are delivered too.
    push_retry_seconds: float = Field(default=86_400.0, gt=0)
    push_backoff_first_seconds: float = Field(default=1.0, gt=0, le=3600)
    push_backoff_max_seconds: float = Field(default=300.0, gt=0, le=86_400)
    push_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    push_concurrency: int = Field(default=64, ge=1, le=1_000)
    push_per_origin: int = Field(default=8, ge=1, le=1_000)
    push_signing_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    push_artifacts: bool = False
    # Where webhooks may go (push/destinations.py): by default public https destinations
    # only; host[:port] patterns (as GATEWAY_OUTBOUND_ALLOWLIST's) the default refuses are
    # admitted too (a loopback receiver in development), and with restrict only those.
    push_allowlist: Annotated[
        list[str], NoDecode, BeforeValidator(_comma_list), AfterValidator(_host_patterns)
    ] = Field(default_factory=list)
    push_restrict: bool = False
    # Long-term memory: every GATEWAY_CORTADEL_* variable (see options/longterm.py).
    cortadel: CortadelSettings = Field(default_factory=CortadelSettings)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"
    log_requests: bool = True

    @field_validator("encryption_keys")
    @classmethod
    def _check_keyring(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            Keyring.parse(value.get_secret_value())  # KeyringError (a ValueError) names why
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_any_case(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("api_keys", mode="before")
    @classmethod
    def _parse_api_keys(cls, value: object) -> object:
        if isinstance(value, str):
            return orjson.loads(value) if value.strip() else {}
        return value

    @field_validator("rate_limit_user", "rate_limit_tenant", "auth_failure_limit", mode="before")
    @classmethod
    def _rate_or_off(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().lower() in ("", "off", "none"):
            return None
        return value

    @field_validator("rate_limit_tenants", mode="before")
    @classmethod
    def _parse_tenant_limits(cls, value: object) -> object:
        if isinstance(value, str):
            return orjson.loads(value) if value.strip() else {}
        return value

    @field_validator("jwt_issuers", mode="before")
    @classmethod
    def _parse_issuers(cls, value: object) -> object:
        if isinstance(value, str):
            return orjson.loads(value) if value.strip() else []
        return value

    @field_validator(
        "agent_plugins",
        "allowed_hosts",
        "cors_origins",
        "push_signing_keys",
        mode="before",
    )
    @classmethod
    def _split_plugins(cls, value: object) -> object:
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return value

    @property
    def open_mode(self) -> bool:
        """No keys or issuers configured: every caller is the local principal."""
        return not self.api_keys and not self.jwt_issuers and self.api_key_secret is None

    def rates(self, tenant: str) -> tuple[Rate | None, Rate | None]:
        """The (principal, tenant) rate limits of a tenant's requests."""
        own = self.rate_limit_tenants.get(tenant)
        user = own.user if own is not None and own.user is not None else self.rate_limit_user
        whole = own.tenant if own is not None and own.tenant is not None else None
        return user, whole or self.rate_limit_tenant

    def host_is_loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False
