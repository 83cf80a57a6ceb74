"""Who is calling: a user within a tenant. The store's methods take the principal and name
the keys of their data themselves. Users of different credential sources never merge by
accident: a token's user carries its issuer's namespace."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["IMPERSONATE", "JWT_USER_PREFIX", "Principal"]

# The role that lets a tenant admin make keys for a user who exists already (over /keys);
# only the operator grants it (GATEWAY_API_KEYS, `gateway keys`), never a token.
IMPERSONATE = "impersonate"
# A token's user is ``jwt:<issuer namespace>:<claim>``: no key names the same principal.
JWT_USER_PREFIX = "jwt:"


@dataclass(frozen=True)
class Principal:
    tenant: str
    user: str
    roles: frozenset[str] = field(default_factory=frozenset)
    # What the caller authenticated with, for the audit trail: "key:<id>" (a managed key),
    # "static:<id>" (GATEWAY_API_KEYS), "jwt:<subject>" (a bearer token), "open" (open mode).
    credential: str = field(default="", compare=False)
