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

    @cached_property
    def keys(self) -> UserKeys:
        return UserKeys.of(self.tenant, self.user)
