"""Who is calling: a user within a tenant. The keys of their data are the store's to name
(``gateway.store.keys.keys_of``)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Principal"]


@dataclass(frozen=True)
class Principal:
    tenant: str
    user: str
    roles: frozenset[str] = field(default_factory=frozenset)
    # What the caller authenticated with, for the audit trail: "key:<id>" (a managed key),
    # "static:<id>" (GATEWAY_API_KEYS), "jwt:<subject>" (a bearer token), "open" (open mode).
    credential: str = field(default="", compare=False)
