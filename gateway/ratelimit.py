"""Rate limits: how many requests a principal, a tenant, or a client address with failed
authentications may make in a window, and how a verdict is told to the client.

Pure logic. The check itself is one Redis script (``store/rate_store.py``), shared by every
replica. A rate is ``<requests>/<seconds>``: ``600/60`` lets 600 requests through at once,
then one every 100 ms (GCRA, a token bucket without a refill timer).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["LimitState", "Rate", "TenantLimits", "Verdict"]

_RATE = re.compile(r"\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*s?\s*")


@dataclass(frozen=True)
class Rate:
    requests: int
    window_seconds: float

    @classmethod
    def parse(cls, text: str) -> Rate:
        found = _RATE.fullmatch(text)
        if found is None:
            raise ValueError("a rate is <requests>/<seconds>, e.g. 600/60")
        rate = cls(int(found[1]), float(found[2]))
        if not 1 <= rate.requests <= 10_000_000 or not 0 < rate.window_seconds <= 86_400:
            raise ValueError("a rate needs 1 to 10000000 requests in 0 to 86400 seconds")
        return rate

    @property
    def interval_ms(self) -> float:
        return self.window_seconds * 1000 / self.requests

    @property
    def window_ms(self) -> float:
        return self.window_seconds * 1000

    def __str__(self) -> str:
        return f"{self.requests}/{self.window_seconds:g}"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def build(value: Any) -> Rate:
            return value if isinstance(value, Rate) else cls.parse(str(value))

        return core_schema.no_info_plain_validator_function(
            build, serialization=core_schema.to_string_ser_schema()
        )


class TenantLimits(BaseModel):
    """One tenant's own rates (``GATEWAY_RATE_LIMIT_TENANTS``); unset ones use the defaults."""

    model_config = ConfigDict(extra="forbid")

    user: Rate | None = None
    tenant: Rate | None = None


@dataclass(frozen=True)
class LimitState:
    name: str  # "user", "tenant", "auth"
    rate: Rate
    remaining: int
    reset_ms: int


@dataclass(frozen=True)
class Verdict:
    """A check of one or more requests (a JSON-RPC batch's calls): ``allowed`` when all
    passed, ``passed`` how many did (the first ones)."""

    allowed: bool
    retry_after_ms: int
    states: tuple[LimitState, ...]
    passed: int = 1

    @classmethod
    def of(cls, names: list[tuple[str, Rate]], reply: list[Any]) -> Verdict:
        states = tuple(
            LimitState(name, rate, int(reply[2 + 2 * i]), int(reply[3 + 2 * i]))
            for i, (name, rate) in enumerate(names)
        )
        return cls(bool(int(reply[0])), int(reply[1]), states, int(reply[2 + 2 * len(names)]))

    @property
    def exceeded(self) -> str:
        """The limit that refused the request (the one with nothing remaining)."""
        return next((s.name for s in self.states if s.remaining <= 0), self.states[0].name)

    def retry_after_seconds(self) -> int:
        return max(1, math.ceil(self.retry_after_ms / 1000))

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The IETF ``RateLimit-Policy`` and ``RateLimit`` fields (draft-ietf-httpapi-
        ratelimit-headers): each policy's quota and window, its remaining requests and the
        seconds until it is replenished."""
        policy = ", ".join(
            f'"{s.name}";q={s.rate.requests};w={math.ceil(s.rate.window_seconds)}'
            for s in self.states
        )
        current = ", ".join(
            f'"{s.name}";r={max(0, s.remaining)};t={math.ceil(s.reset_ms / 1000)}'
            for s in self.states
        )
        return [(b"ratelimit-policy", policy.encode()), (b"ratelimit", current.encode())]
