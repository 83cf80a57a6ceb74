"""Connecting to Redis: one standalone server, a primary found through Sentinel, or a
Redis Cluster.

``REDIS_URL=redis+cluster://host:port`` (or ``rediss+cluster://``), or any URL with
``GATEWAY_REDIS_CLUSTER=true``, selects Redis Cluster: the address is one node,
the others are discovered. Pub/sub needs no cluster client (a PUBLISH reaches
every node), so events are read from the named node over a plain connection.

``GATEWAY_REDIS_SENTINELS`` selects Sentinel (redis-py's ``redis.asyncio.sentinel``): every
connection — the pools, the multiplexed one, pub/sub and blocking reads — asks the Sentinels
for the primary of ``GATEWAY_REDIS_SENTINEL_MASTER`` when it connects, and a connection to a
primary that died or was demoted (``READONLY``) fails and connects again to the new one.
REDIS_URL then gives the data nodes' scheme, credentials and database; its host is unused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import hiredis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)

from gateway.store.multiplex import Multiplexed
from gateway.store.replica_ack import ReplicaAck, ReplicaAcked

if TYPE_CHECKING:
    from gateway.settings import Settings

__all__ = ["RedisClient", "RedisTarget"]

RedisClient = Redis | RedisCluster


class _HiredisPacking:
    """Commands packed by hiredis (C) rather than redis-py's asyncio connection, which packs
    and encodes every argument in Python: the store's scripts take 30-odd arguments, and
    packing them was the largest single cost of a send in the gateway process. Commands
    whose name holds a space (``CONFIG GET``), and floats (redis-py writes them with
    ``repr``), booleans (which it refuses) and memoryviews are left to redis-py."""

    def pack_command(self, *args: Any) -> list[bytes]:
        name = args[0]
        spaced = " " in name if isinstance(name, str) else b" " in name
        if spaced or not _HIREDIS_TYPES.issuperset(map(type, args)):
            packed: list[bytes] = super().pack_command(*args)  # type: ignore[misc]
            return packed
        return [hiredis.pack_command(args)]


# Argument types hiredis packs exactly as redis-py does.
_HIREDIS_TYPES = frozenset({str, bytes, int})


class _Connection(_HiredisPacking, Connection):
    pass


class _SSLConnection(_HiredisPacking, SSLConnection):
    pass


class _UnixConnection(_HiredisPacking, UnixDomainSocketConnection):
    pass


class _SentinelConnection(_HiredisPacking, SentinelManagedConnection):
    pass


class _SentinelSSLConnection(_HiredisPacking, SentinelManagedSSLConnection):
    pass


# redis-py's connection class for each scheme (its URL parser picks it, over any passed in),
# and ours that packs with hiredis.
_PACKING: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _Connection,
    SSLConnection: _SSLConnection,
    UnixDomainSocketConnection: _UnixConnection,
    SentinelManagedConnection: _SentinelConnection,
    SentinelManagedSSLConnection: _SentinelSSLConnection,
}


def _acked(base: type[AbstractConnection], ack: ReplicaAck | None) -> type[AbstractConnection]:
    """``base``, its writes followed by WAIT (``replica_ack.py``) when ``ack`` asks for it."""
    if ack is None:
        return base
    return type(f"Acked{base.__name__}", (ReplicaAcked, base), {"replica_ack": ack})


def _address(item: str) -> tuple[str, int]:
    host, _, port = item.rpartition(":")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class SentinelTarget:
    """The Sentinels to ask for the primary of ``master``."""

    addresses: tuple[tuple[str, int], ...]
    master: str
    password: str | None = None
    tls: bool = False

    def manager(self, url: str, timeout: float) -> Sentinel:
        """redis-py's Sentinel client, its data connections made as ``url`` says (scheme,
        credentials, database); its own to the Sentinels with their password and TLS."""
        parsed = ConnectionPool.from_url(url).connection_kwargs
        data = {k: parsed[k] for k in ("username", "password", "db") if parsed.get(k)}
        if urlsplit(url).scheme == "rediss":
            data["ssl"] = True
        own: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if self.password:
            own["password"] = self.password
        if self.tls:
            own["ssl"] = True
        return Sentinel(  # type: ignore[no-untyped-call]
            list(self.addresses),
            sentinel_kwargs=own,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            **data,
        )


@dataclass(frozen=True)
class RedisTarget:
    url: str  # a plain redis://, rediss:// or unix:// URL
    cluster: bool
    sentinel: SentinelTarget | None = None
    # Writes wait for replicas (GATEWAY_REDIS_MIN_REPLICAS_ACK): None, they do not.
    replica_ack: ReplicaAck | None = None
    # One Sentinel client for the target's connections (made on first use).
    _sentinels: dict[float, Sentinel] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, url: str, cluster: bool = False) -> RedisTarget:
        parts = urlsplit(url)
        if parts.scheme.endswith("+cluster"):
            plain = parts._replace(scheme=parts.scheme.removesuffix("+cluster"))
            return cls(urlunsplit(plain), True)
        return cls(url, cluster)

    @classmethod
    def from_settings(cls, settings: Settings) -> RedisTarget:
        """REDIS_URL and the settings that say how to reach it (Sentinel, replica acks)."""
        from gateway.configuration import ConfigurationError

        if not settings.redis_url:
            raise ConfigurationError(["REDIS_URL: not set; the runtime needs a Redis to use"])
        target = cls.parse(settings.redis_url, settings.redis_cluster)
        sentinel = None
        if settings.redis_sentinels:  # not with a cluster (the settings' own check)
            password = settings.redis_sentinel_password
            sentinel = SentinelTarget(
                tuple(_address(a) for a in settings.redis_sentinels),
                settings.redis_sentinel_master,
                password.get_secret_value() if password is not None else None,
                settings.redis_sentinel_tls,
            )
        ack = None
        if settings.redis_min_replicas_ack:
            ack = ReplicaAck(settings.redis_min_replicas_ack, settings.redis_replica_ack_timeout_ms)
        return cls(target.url, target.cluster, sentinel, ack)

    def _sentinel(self, timeout: float) -> Sentinel:
        assert self.sentinel is not None
        if timeout not in self._sentinels:
            self._sentinels[timeout] = self.sentinel.manager(self.url, timeout)
        return self._sentinels[timeout]

    def client(self, timeout: float) -> Any:
        """The data client (``Redis`` or ``RedisCluster``)."""
        options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if self.cluster:
            cluster = RedisCluster.from_url(self.url, **options)
            if self.replica_ack is not None:  # every node's connections, found or to be
                manager = cluster.nodes_manager
                kind = manager.connection_kwargs.get("connection_class", Connection)
                manager.connection_kwargs["connection_class"] = _acked(kind, self.replica_ack)
                for node in manager.startup_nodes.values():
                    node.connection_class = _acked(node.connection_class, self.replica_ack)  # type: ignore[assignment]
            return cluster
        if self.sentinel is not None:
            client = self._sentinel(timeout).master_for(
                self.sentinel.master, max_connections=512, **options
            )
            pool = client.connection_pool
        else:
            pool = ConnectionPool.from_url(self.url, max_connections=512, **options)
            client = Redis.from_pool(pool)
        packing = _PACKING.get(pool.connection_class, pool.connection_class)
        pool.connection_class = _acked(packing, self.replica_ack)
        return client

    def multiplexed(self, timeout: float, traced: bool = False) -> Multiplexed | None:
        """The connection for the hot scripts (``multiplex.py``): standalone Redis only,
        and not while tracing, whose spans come from the instrumented client. Through
        Sentinel it asks for the primary each time it connects."""
        if self.cluster or traced:
            return None
        hot = Multiplexed.for_url(self.url, timeout, self.replica_ack)
        if hot is not None and self.sentinel is not None:
            sentinels, master = self._sentinel(timeout), self.sentinel.master
            hot.follow(lambda: sentinels.discover_master(master))
        return hot

    def events_client(self, timeout: float) -> Redis:
        """A plain connection for pub/sub (in a cluster, to the named node)."""
        if self.sentinel is not None:
            client: Redis = self._sentinel(timeout).master_for(
                self.sentinel.master, socket_timeout=None, socket_connect_timeout=timeout
            )
            return client
        return Redis.from_url(self.url, socket_connect_timeout=timeout)
