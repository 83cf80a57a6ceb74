"""Rate-limit checks: one script call each (a JSON-RPC batch's calls in one), against
counters every replica shares; on the store's multiplexed connection when it has one (a
request's check then shares a write with the sends of the moment instead of taking a pooled
connection)."""

from __future__ import annotations

from gateway.ratelimit import Rate, Verdict
from gateway.store.keys import auth_failure_keys, rate_keys
from gateway.store.lua import Scripts
from gateway.store.lua.limits import RateArgs
from gateway.store.multiplex import Multiplexed
from gateway.store.translate import translated

__all__ = ["RateStore"]


class RateStore:
    def __init__(self, scripts: Scripts, hot: Multiplexed | None = None) -> None:
        self._script, self._hot = scripts.rate, hot

    async def _check(
        self, keys: list[str], limits: list[tuple[str, Rate]], count: int = 1
    ) -> Verdict:
        spans = [f"{ms:.3f}" for _, rate in limits for ms in (rate.interval_ms, rate.window_ms)]
        args = RateArgs(count, spans).argv()
        if self._hot is not None:
            reply = await self._hot.script(self._script, keys, args)
        else:
            reply = await self._script(keys=keys, args=args)
        return Verdict.of(limits, reply)

    @translated
    async def request(
        self,
        tenant: str,
        user: str,
        user_rate: Rate | None,
        tenant_rate: Rate | None,
        count: int = 1,
    ) -> Verdict:
        """Charge ``count`` requests to the principal's and the tenant's limits (those set):
        as many pass as both let through."""
        user_key, tenant_key = rate_keys(tenant, user)
        keys, limits = [], []
        if user_rate is not None:
            keys.append(user_key)
            limits.append(("user", user_rate))
        if tenant_rate is not None:
            keys.append(tenant_key)
            limits.append(("tenant", tenant_rate))
        return await self._check(keys, limits, count)

    @translated
    async def auth_failure(self, address: str, credential: str, rate: Rate) -> Verdict:
        """Charge one failed authentication to the client address and to the credential
        (a digest's prefix) it sent: the verdict's states are the address's, then the
        credential's."""
        keys = list(auth_failure_keys(address, credential))
        return await self._check(keys, [("auth", rate), ("credential", rate)])
