"""Configuration of the identity providers whose bearer tokens (JWT) the gateway accepts."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.principal import JWT_USER_PREFIX

__all__ = ["ACCEPTED_ALGORITHMS", "JwtIssuer"]

# Asymmetric signatures only: a symmetric one (HS256) would let anyone holding the public
# key sign tokens, and ``none`` is no signature at all.
ACCEPTED_ALGORITHMS = ("RS256", "ES256", "EdDSA")


class JwtIssuer(BaseModel):
    """One issuer (``GATEWAY_JWT_ISSUERS`` is a JSON list of these).

    The principal of a token: its tenant is ``tenant`` (fixed for the issuer) or the value
    of the ``tenant_claim``; its user is the ``user_claim`` (``sub`` by default, the client
    id of a client-credentials token); its roles are the ``roles_claim`` (a list, or a
    space-separated string such as ``scope``). Claim names may be dotted paths into nested
    objects (``realm_access.roles``). The principal's user is ``jwt:<namespace>:<claim>``:
    ``namespace`` (default: the first 12 hex digits of the issuer's SHA-256) keeps a
    token's users apart from API keys' and from other issuers'; set it to keep users when
    the issuer's URL changes."""

    model_config = ConfigDict(extra="forbid")

    issuer: str = Field(min_length=1)
    jwks_url: str = Field(min_length=1)
    audience: list[str] = Field(min_length=1)
    tenant: str | None = Field(default=None, min_length=1, max_length=128)
    tenant_claim: str | None = Field(default=None, min_length=1)
    user_claim: str = Field(default="sub", min_length=1)
    roles_claim: str | None = "roles"
    algorithms: list[str] = Field(default_factory=lambda: list(ACCEPTED_ALGORITHMS))
    namespace: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,64}$")

    @property
    def user_prefix(self) -> str:
        """What a token's user claim is prefixed with: ``jwt:<namespace>:``."""
        namespace = self.namespace or hashlib.sha256(self.issuer.encode()).hexdigest()[:12]
        return f"{JWT_USER_PREFIX}{namespace}:"

    @model_validator(mode="before")
    @classmethod
    def _one_audience(cls, value: object) -> object:
        if isinstance(value, dict) and isinstance(value.get("audience"), str):
            return {**value, "audience": [value["audience"]]}
        return value

    @model_validator(mode="after")
    def _tenant_source(self) -> JwtIssuer:
        if (self.tenant is None) == (self.tenant_claim is None):
            raise ValueError("each issuer needs exactly one of tenant and tenant_claim")
        unknown = set(self.algorithms) - set(ACCEPTED_ALGORITHMS)
        if unknown or not self.algorithms:
            raise ValueError(f"algorithms may only be {', '.join(ACCEPTED_ALGORITHMS)}")
        if not self.jwks_url.startswith(("http://", "https://")):
            raise ValueError("jwks_url must be an http(s) URL")
        return self
