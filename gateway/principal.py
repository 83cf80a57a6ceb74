"""Who is calling: a user within a tenant."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from gateway.store.keys import UserKeys

__all__ = ["Principal"]


@dataclass(frozen=True)
class Principal:
    tenant: str
    user: str
    roles: frozenset[str] = field(default_factory=frozenset)
    # What the caller authenticated with, for the audit trail: "key:<id>" (a managed key),
    # "static:<id>" (GATEWAY_API_KEYS), "jwt:<subject>" (a bearer token), "open" (open mode).
    credential: str = field(default="", compare=False)

    @cached_property
    def keys(self) -> UserKeys:
        return UserKeys.of(self.tenant, self.user)
