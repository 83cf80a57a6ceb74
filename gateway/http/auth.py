"""Authentication: bearer tokens (JWT) and API keys (Bearer or X-API-Key) to principals,
and the tenant check.

Pure ASGI middleware. Static keys are compared by their SHA-256 digest, so lookups take
the same time whatever prefix of a key an attacker guesses. A bearer credential shaped
like a JWT goes to the token verifier when identity providers are configured, one shaped
like a managed key (``gwk_<id>_<secret>``) to the managed keys; anything else is a static
key of ``GATEWAY_API_KEYS``.

``Tenant-Name``, when sent, must name the tenant of the credentials (an API key's, or the
token's tenant claim or its issuer's fixed tenant): otherwise the request is refused (403)
before anything is read or written.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.errors import ForbiddenError, GatewayError, UnauthenticatedError
from gateway.http.headers import header
from gateway.http.ratelimit import RateLimiter, credential_tag
from gateway.http.responses import error_response
from gateway.identity.managed import ManagedKeys
from gateway.identity.tokens import TokenVerifier, looks_like_jwt
from gateway.principal import Principal
from gateway.settings import ApiKeyEntry

__all__ = ["LOCAL_PRINCIPAL", "AuthMiddleware", "Authenticator", "identify"]

# Open mode (no keys, loopback only) is one local operator: it may change the registry.
LOCAL_PRINCIPAL = Principal("default", "local", frozenset({"admin"}), credential="open")

# The card routes exactly: the default agent's and one agent's (a single path segment).
_CARD_PATH = re.compile(r"(?:/agents/[^/]+)?(?:/\.well-known)?/agent-card\.json")
_READ_METHODS = frozenset({"GET", "HEAD"})
_PUBLIC_PATHS = frozenset(
    {"/healthz", "/readyz", "/openapi.yaml", "/metrics", "/.well-known/jwks.json"}
)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _credential(headers: Headers) -> str | None:
    key = header(headers.raw, b"x-api-key")
    auth = header(headers.raw, b"authorization")
    if key is None and auth is not None:
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer":
            key = token.strip()
    return key or None


class Authenticator:
    def __init__(
        self,
        api_keys: Mapping[str, ApiKeyEntry],
        tokens: TokenVerifier | None = None,
        managed: ManagedKeys | None = None,
    ) -> None:
        self._by_digest = {
            _digest(key): Principal(
                e.tenant, e.user, frozenset(e.roles), credential=f"static:{_digest(key).hex()[:8]}"
            )
            for key, e in api_keys.items()
        }
        self._tokens = tokens if tokens is not None and tokens.enabled else None
        self._managed = managed

    @property
    def open(self) -> bool:
        return not self._by_digest and self._tokens is None and self._managed is None

    async def authenticate(self, headers: Headers) -> Principal:
        principal = await self.identify(headers)
        self.check_tenant(headers, principal)
        return principal

    async def identify(self, headers: Headers) -> Principal:
        """Whom the credentials name (the tenant header not yet checked)."""
        return LOCAL_PRINCIPAL if self.open else await self._from_credential(headers)

    @staticmethod
    def check_tenant(headers: Headers, principal: Principal) -> None:
        tenant = header(headers.raw, b"tenant-name")
        if tenant is not None and tenant != principal.tenant:
            raise ForbiddenError("Tenant-Name does not match the credentials")

    async def _from_credential(self, headers: Headers) -> Principal:
        credential = _credential(headers)
        if credential is None:
            raise UnauthenticatedError()
        if self._tokens is not None and looks_like_jwt(credential):
            return await self._tokens.principal(credential)
        if self._managed is not None and self._managed.shaped(credential):
            return await self._managed.principal(credential)
        principal = self._by_digest.get(_digest(credential))
        if principal is None:
            raise UnauthenticatedError()
        return principal


class AuthMiddleware:
    def __init__(
        self, app: ASGIApp, authenticator: Authenticator, limiter: RateLimiter | None = None
    ) -> None:
        self.app, self.authenticator, self.limiter = app, authenticator, limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in _PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        # Cards are public, but a registered agent's card needs the caller's tenant: a card
        # request is authenticated only when it carries credentials (or in open mode).
        credentials = "authorization" in headers or "x-api-key" in headers
        anonymous_card = (
            scope["method"] in _READ_METHODS
            and _CARD_PATH.fullmatch(path) is not None
            and not (self.authenticator.open or credentials)
        )
        if not anonymous_card:
            try:
                principal = await self._authenticate(scope, headers)
            except GatewayError as exc:
                await error_response(exc)(scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)

    async def _authenticate(self, scope: Scope, headers: Headers) -> Principal:
        """The principal; failed attempts are throttled (``RateLimiter.failed``). The caller
        is noted (``state["caller"]``) before the tenant check, for the audit trail."""
        principal = await self._identify(scope, headers)
        scope.setdefault("state", {})["caller"] = principal
        self.authenticator.check_tenant(headers, principal)
        return principal

    async def _identify(self, scope: Scope, headers: Headers) -> Principal:
        client = scope.get("client")
        return await identify(
            self.authenticator, self.limiter, client[0] if client else None, headers
        )


async def identify(
    authenticator: Authenticator, limiter: RateLimiter | None, address: str | None, headers: Headers
) -> Principal:
    """Whom a request's credentials name (the tenant header not yet checked), failed
    attempts from ``address`` throttled (``RateLimiter.failed``): every binding's way in."""
    if limiter is None or authenticator.open:
        return await authenticator.identify(headers)
    tag = credential_tag(_credential(headers))
    blocked = limiter.blocked(address, tag)
    if blocked is not None:
        raise blocked
    try:
        return await authenticator.identify(headers)
    except UnauthenticatedError:
        refusal = await limiter.failed(address, tag)
        if refusal is not None:
            raise refusal from None
        raise
