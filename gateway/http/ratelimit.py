"""Rate limits at the HTTP edge: every authenticated request is charged to its principal's
and its tenant's limits (one script call, shared by every replica), and every failed
authentication to its client address and to the credential it sent from there.

A request over a limit is answered 429 with ``Retry-After`` and the IETF ``RateLimit`` /
``RateLimit-Policy`` fields; requests within them carry the fields too. A request that
holds several calls (a JSON-RPC batch) charges the calls after its first through the
``Charge`` the middleware leaves in the request's state (``rate_limit``); the fields then
tell the state after the last charge. Health, readiness,
metrics, the contract and anonymous card requests have no principal and are not charged.

Failed authentications throttle failing attempts only, never a valid credential: clients
behind one proxy share an address, and one of them sending wrong keys must not lock the
others out. An address over its limit has each failing attempt answered 429 instead of
401 (credentials are still checked, so a valid one is served); a credential that keeps
failing from an address is refused (429) without being checked again until its
``Retry-After`` has passed, by the replica that refused it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import metrics
from gateway.errors import RateLimitedError
from gateway.http.response_start import on_start
from gateway.http.responses import error_response
from gateway.principal import Principal
from gateway.ratelimit import Verdict
from gateway.settings import Settings
from gateway.store.rate_store import RateStore

__all__ = ["Charge", "RateLimitMiddleware", "RateLimiter", "credential_tag"]

_BLOCKED_MAX = 10_000


def _refusal(verdict: Verdict) -> RateLimitedError:
    limit = verdict.exceeded
    metrics.series(metrics.RATE_LIMITED, limit).inc()
    fields = {name.decode(): value.decode() for name, value in verdict.headers()}
    return RateLimitedError(limit, verdict.retry_after_seconds(), fields)


class RateLimiter:
    def __init__(self, settings: Settings, store: RateStore) -> None:
        self._settings, self._store = settings, store
        self._blocked: dict[tuple[str, str], float] = {}  # (address, credential) -> end

    @property
    def active(self) -> bool:
        s = self._settings
        return bool(s.rate_limit_user or s.rate_limit_tenant or s.rate_limit_tenants)

    async def request(self, principal: Principal, count: int = 1) -> Verdict | None:
        """Charge ``count`` requests; None when the principal has no limits."""
        user_rate, tenant_rate = self._settings.rates(principal.tenant)
        if user_rate is None and tenant_rate is None:
            return None
        return await self._store.request(
            principal.tenant, principal.user, user_rate, tenant_rate, count
        )

    async def admit(self, principal: Principal) -> None:
        """Charge one request of a binding without HTTP fields (gRPC); raises the refusal of
        one over a limit."""
        verdict = await self.request(principal) if self.active else None
        if verdict is not None and not verdict.allowed:
            raise _refusal(verdict)

    def blocked(self, address: str | None, credential: str) -> RateLimitedError | None:
        """The refusal of a credential (``credential_tag``) still blocked at an address for
        failing to authenticate there."""
        key = (address or "", credential)
        until = self._blocked.get(key)
        if until is None:
            return None
        left = until - time.monotonic()
        if left <= 0:
            del self._blocked[key]
            return None
        metrics.series(metrics.RATE_LIMITED, "auth").inc()
        return RateLimitedError("auth", max(1, int(left + 0.999)))

    async def failed(self, address: str | None, credential: str) -> RateLimitedError | None:
        """Charge a failed authentication; the refusal when the address is over its limit
        (the credential is then blocked there too when it is the one that keeps failing)."""
        rate = self._settings.auth_failure_limit
        if rate is None or not address:
            return None
        verdict = await self._store.auth_failure(address, credential, rate)
        if verdict.allowed:
            return None
        if verdict.states[1].remaining <= 0:
            if len(self._blocked) >= _BLOCKED_MAX:
                now = time.monotonic()
                self._blocked = {a: t for a, t in self._blocked.items() if t > now}
            self._blocked[address, credential] = time.monotonic() + verdict.retry_after_ms / 1000
        # Told as the address's limit: the credential's is never the only one exhausted.
        return _refusal(Verdict(verdict.allowed, verdict.retry_after_ms, verdict.states[:1]))


def credential_tag(credential: str | None) -> str:
    """What names a credential in the failure counters: a digest's prefix, never the
    credential ("-" for none sent)."""
    if credential is None:
        return "-"
    return hashlib.sha256(credential.encode()).hexdigest()[:24]


class Charge:
    """The limits one request was charged to, for the further calls it holds."""

    def __init__(self, limiter: RateLimiter, principal: Principal, verdict: Verdict) -> None:
        self._limiter, self._principal, self.verdict = limiter, principal, verdict

    async def more(self, count: int) -> tuple[int, RateLimitedError | None]:
        """Charge ``count`` more calls: how many pass (the first ones), and the refusal of
        the others (None when all pass)."""
        verdict = await self._limiter.request(self._principal, count) if count > 0 else None
        if verdict is None:
            return count, None
        self.verdict = verdict
        return verdict.passed, None if verdict.allowed else _refusal(verdict)


class RateLimitMiddleware:
    def __init__(self, app: ASGIApp, limiter: RateLimiter) -> None:
        self.app, self.limiter = app, limiter

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        principal = scope.get("state", {}).get("principal") if scope["type"] == "http" else None
        if principal is None or not self.limiter.active:
            return self.app(scope, receive, send)  # not awaited here (see stack.py)
        return self._limited(scope, receive, send, principal)

    async def _limited(
        self, scope: Scope, receive: Receive, send: Send, principal: Principal
    ) -> None:
        verdict = await self.limiter.request(principal)
        if verdict is None:
            await self.app(scope, receive, send)
            return
        if not verdict.allowed:
            await error_response(_refusal(verdict))(scope, receive, send)
            return
        charge = scope["state"]["rate_limit"] = Charge(self.limiter, principal, verdict)

        def add_fields(message: Message) -> None:
            message["headers"] = [*message.get("headers", ()), *charge.verdict.headers()]

        on_start(scope, add_fields)
        await self.app(scope, receive, send)
