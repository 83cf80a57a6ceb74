"""The one place where Redis client failures become a gateway error."""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

import redis
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

__all__ = ["UNAVAILABLE", "raised_by_the_client", "translated"]

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


_CLIENT = f"{Path(redis.__file__).parent}{os.sep}"
_GATEWAY = f"{Path(__file__).parents[1]}{os.sep}"


def raised_by_the_client(exc: BaseException) -> bool:
    """Whether ``exc`` comes from inside redis-py rather than the gateway's code: its
    traceback enters redis-py after the gateway's last frame (whatever the client called
    then, the standard library or the event loop, raised it). Its cluster client, closing
    connections while the cluster changes, lets other commands on them fail with
    ``AttributeError`` or ``RuntimeError`` (uvloop's "the handler is closed"): a Redis that
    will answer again, not a defect."""
    frame, inside = exc.__traceback__, False
    while frame is not None:
        path = frame.tb_frame.f_code.co_filename
        if path.startswith(_GATEWAY):
            inside = False
        elif path.startswith(_CLIENT):
            inside = True
        frame = frame.tb_next
    return inside


def translated(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Raise ``StoreUnavailableError`` (503, Retry-After) when Redis cannot serve the
    command now (``UNAVAILABLE``, or the client's own failures while a cluster changes,
    ``raised_by_the_client``), ``ReplicasBehindError`` (503) when a write did not reach
    enough replicas in time."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except ReplicaAckError as exc:
            raise ReplicasBehindError() from exc
        except UNAVAILABLE as exc:
            raise StoreUnavailableError() from exc
        except (AttributeError, RuntimeError) as exc:
            if raised_by_the_client(exc):
                raise StoreUnavailableError() from exc
            raise

    return wrapper
