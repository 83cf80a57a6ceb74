"""Bearer tokens (JWT) from the configured identity providers, to principals.

Every token is checked by PyJWT against its issuer's published keys (``jwks.py``): the
algorithm must be an accepted asymmetric one and the key's own, the signature valid, and
``iss``, ``aud``, ``exp`` (required) and ``nbf`` hold within ``leeway`` seconds. Refusals
name the failed check in a fixed sentence, never a claim's value. A verified token's
principal is kept (by the token's digest) until the token expires, so a client that reuses
its token pays for the signature once.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

import httpx
import jwt
from jwt import PyJWK

from gateway.errors import UnauthenticatedError, UnavailableError
from gateway.identity.jwks import JwksCache
from gateway.options.identity import JwtIssuer
from gateway.principal import IMPERSONATE, Principal

__all__ = ["TokenVerifier", "looks_like_jwt"]

_CACHE_ENTRIES = 10_000


def looks_like_jwt(token: str) -> bool:
    """A compact JWS: three base64url segments, the first a JSON object ('eyJ')."""
    return token.startswith("eyJ") and token.count(".") == 2


def _refused(reason: str) -> UnauthenticatedError:
    return UnauthenticatedError(f"Bearer token refused: {reason}", reason="invalid_token")


def _claim(claims: Mapping[str, Any], path: str) -> Any:
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _text_claim(claims: Mapping[str, Any], path: str, what: str) -> str:
    value = _claim(claims, path)
    if not isinstance(value, str) or not value or len(value) > 256:
        raise _refused(f"the {what} claim is missing or not a string")
    return value


def _roles(claims: Mapping[str, Any], path: str | None) -> frozenset[str]:
    value = _claim(claims, path) if path else None
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


class _Issuer:
    def __init__(self, config: JwtIssuer, jwks: JwksCache) -> None:
        self.config, self.jwks = config, jwks


class TokenVerifier:
    def __init__(
        self,
        issuers: Iterable[JwtIssuer],
        http: httpx.AsyncClient,
        *,
        leeway: float,
        jwks_ttl: float,
        jwks_min_refetch: float,
    ) -> None:
        self._issuers = {
            i.issuer: _Issuer(
                i, JwksCache(http, i.jwks_url, ttl=jwks_ttl, min_refetch=jwks_min_refetch)
            )
            for i in issuers
        }
        self._leeway = leeway
        self._verified: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return bool(self._issuers)

    def jwks(self, issuer: str) -> JwksCache:
        return self._issuers[issuer].jwks

    async def principal(self, token: str) -> Principal:
        digest = hashlib.sha256(token.encode()).digest()
        cached = self._verified.get(digest)
        if cached is not None:
            principal, expires = cached
            if time.time() <= expires + self._leeway:
                return principal
            del self._verified[digest]
        principal, expires = await self._verify(token)
        self._verified[digest] = (principal, expires)
        if len(self._verified) > _CACHE_ENTRIES:
            self._verified.popitem(last=False)
        return principal

    def _unverified(self, token: str) -> tuple[dict[str, Any], _Issuer]:
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise _refused("it is not a well-formed JWT") from exc
        iss = claims.get("iss")
        issuer = self._issuers.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise _refused("its issuer is not accepted")
        if header.get("alg") not in issuer.config.algorithms:
            raise _refused("its signing algorithm is not accepted")
        return header, issuer

    async def _key(self, issuer: _Issuer, header: Mapping[str, Any]) -> PyJWK:
        kid = header.get("kid")
        key = await issuer.jwks.key(kid if isinstance(kid, str) else None)
        if key is None:
            if not issuer.jwks.loaded:
                raise UnavailableError(
                    "The identity provider's keys cannot be fetched; retry later"
                )
            raise _refused("its signing key is not known")
        if key.algorithm_name != header.get("alg"):
            raise _refused("its signing algorithm does not match its key")
        return key

    async def _verify(self, token: str) -> tuple[Principal, float]:
        header, issuer = self._unverified(token)
        key = await self._key(issuer, header)
        config = issuer.config
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],
                audience=config.audience,
                issuer=config.issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError as exc:
            raise _refused("it has expired") from exc
        except jwt.ImmatureSignatureError as exc:
            raise _refused("it is not valid yet") from exc
        except jwt.InvalidAudienceError as exc:
            raise _refused("its audience is not accepted") from exc
        except jwt.InvalidIssuerError as exc:
            raise _refused("its issuer is not accepted") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise _refused(f"it lacks the {exc.claim} claim") from exc
        except jwt.InvalidSignatureError as exc:
            raise _refused("its signature is invalid") from exc
        except jwt.PyJWTError as exc:
            raise _refused("it is not valid") from exc
        tenant = config.tenant or _text_claim(claims, config.tenant_claim or "", "tenant")
        user = _text_claim(claims, config.user_claim, "user")
        subject = claims.get("sub") if isinstance(claims.get("sub"), str) else user
        # The issuer's namespace keeps its users apart from every other credential's; and
        # acting for other users is the operator's to grant, never a token's.
        roles = _roles(claims, config.roles_claim) - {IMPERSONATE}
        principal = Principal(tenant, config.user_prefix + user, roles, credential=f"jwt:{subject}")
        return principal, float(claims["exp"])
