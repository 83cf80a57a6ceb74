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

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

__all__ = ["RedisClient", "RedisTarget"]

RedisClient = Redis | RedisCluster


@dataclass(frozen=True)
class RedisTarget:
    url: str  # a plain redis:// or rediss:// URL
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
        return Redis.from_url(self.url, max_connections=512, **options)

    def events_client(self, timeout: float) -> Redis:
        """A plain connection for pub/sub (in a cluster, to the named node)."""
        return Redis.from_url(self.url, socket_connect_timeout=timeout)
