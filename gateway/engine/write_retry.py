"""A run's writes retried through a Redis outage (``retrying``), for at most the job's
lease: past it another worker may take the run over, and this one's writes are fenced off
anyway."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gateway.backoff import Backoff, RetryPolicy
from gateway.errors import StoreUnavailableError

__all__ = ["STORE_RETRY", "retrying"]

T = TypeVar("T")

log = logging.getLogger("gateway.runs")

STORE_RETRY = RetryPolicy(Backoff(0.05, 2.0), (StoreUnavailableError,))


def _retried(_: BaseException) -> None:
    log.warning("store unavailable; retrying the run's write")


async def retrying(call: Callable[[], Awaitable[T]], seconds: float) -> T:
    """``call()``, retried with backoff while the store is unavailable, for up to ``seconds``."""
    return await STORE_RETRY.call(call, within=seconds, on_retry=_retried)
