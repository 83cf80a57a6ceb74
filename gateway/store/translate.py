"""The one place where Redis client failures become a gateway error."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.errors import ReplicasBehindError, StoreUnavailableError
from gateway.store.replica_ack import ReplicaAckError

__all__ = ["translated"]

P = ParamSpec("P")
R = TypeVar("R")


def translated(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Raise ``StoreUnavailableError`` (503) when Redis cannot be reached or times out,
    ``ReplicasBehindError`` (503) when a write did not reach enough replicas in time."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except ReplicaAckError as exc:
            raise ReplicasBehindError() from exc
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise StoreUnavailableError() from exc

    return wrapper
