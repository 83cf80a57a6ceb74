"""The one place where Redis client failures become a gateway error."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from redis.exceptions import (
    ClusterError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.errors import ReplicasBehindError, StoreUnavailableError
from gateway.store.replica_ack import ReplicaAckError

__all__ = ["UNAVAILABLE", "translated"]

P = ParamSpec("P")
R = TypeVar("R")

# What a Redis that will answer again raises meanwhile: unreachable, slow, or between two
# primaries — a shard without a primary (CLUSTERDOWN, MASTERDOWN), a slot in migration
# (TRYAGAIN), slots not covered while the client learns the new map, a primary demoted to a
# replica (READONLY), a full memory (OOM).
UNAVAILABLE: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    OSError,
    ClusterError,
    RedisClusterException,
    TryAgainError,
    ReadOnlyError,
    OutOfMemoryError,
)


def translated(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Raise ``StoreUnavailableError`` (503, Retry-After) when Redis cannot serve the
    command now (``UNAVAILABLE``), ``ReplicasBehindError`` (503) when a write did not
    reach enough replicas in time."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except ReplicaAckError as exc:
            raise ReplicasBehindError() from exc
        except UNAVAILABLE as exc:
            raise StoreUnavailableError() from exc

    return wrapper
