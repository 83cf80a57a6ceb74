"""Connecting to Redis: one standalone server, or a Redis Cluster.

``REDIS_URL=redis+cluster://host:port`` (or ``rediss+cluster://``), or any URL with
``GATEWAY_REDIS_CLUSTER=true``, selects Redis Cluster: the address is one node,
the others are discovered. Pub/sub needs no cluster client (a PUBLISH reaches
every node), so events are read from the named node over a plain connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
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

from gateway.store.multiplex import Multiplexed

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


# redis-py's connection class for each scheme (its URL parser picks it, over any passed in),
# and ours that packs with hiredis.
_PACKING: dict[type[AbstractConnection], type[AbstractConnection]] = {
    Connection: _Connection,
    SSLConnection: _SSLConnection,
    UnixDomainSocketConnection: _UnixConnection,
}


@dataclass(frozen=True)
class RedisTarget:
    url: str  # a plain redis://, rediss:// or unix:// URL
    cluster: bool

    @classmethod
    def parse(cls, url: str, cluster: bool = False) -> RedisTarget:
        parts = urlsplit(url)
        if parts.scheme.endswith("+cluster"):
            plain = parts._replace(scheme=parts.scheme.removesuffix("+cluster"))
            return cls(urlunsplit(plain), True)
        return cls(url, cluster)

    def client(self, timeout: float) -> Any:
        """The data client (``Redis`` or ``RedisCluster``)."""
        options: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
        if self.cluster:
            return RedisCluster.from_url(self.url, **options)
        pool = ConnectionPool.from_url(self.url, max_connections=512, **options)
        pool.connection_class = _PACKING.get(pool.connection_class, pool.connection_class)
        return Redis.from_pool(pool)

    def multiplexed(self, timeout: float, traced: bool = False) -> Multiplexed | None:
        """The connection for the hot scripts (``multiplex.py``): standalone Redis only,
        and not while tracing, whose spans come from the instrumented client."""
        if self.cluster or traced:
            return None
        return Multiplexed.for_url(self.url, timeout)

    def events_client(self, timeout: float) -> Redis:
        """A plain connection for pub/sub (in a cluster, to the named node)."""
        return Redis.from_url(self.url, socket_connect_timeout=timeout)
