"""Which environment variables a registry entry's ``apiKeyEnv`` may name.

An entry is a tenant admin's input, and the key it names is sent to a URL of the entry's
choosing: were any name allowed, a tenant could have the gateway send its own secrets
(``GATEWAY_API_KEYS``, ``REDIS_URL``) there, or learn which variables exist. Only the names
the operator allows are read: those starting with ``GATEWAY_AGENT_KEY_ENV_PREFIX``
(``AGENT_SECRET_`` by default; empty: none) and those listed in
``GATEWAY_AGENT_KEY_ENV_NAMES`` — and never a name of the gateway's own configuration
(``GATEWAY_*``, ``REDIS_*``, ``OTEL_*``, any setting's variable, in any case), whatever
the settings say. A refused name reads as an unset one, at registration (the same 400) and
at run time (no key), so entries stored before a name was refused get nothing either.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import AliasChoices

from gateway.settings import Settings

__all__ = ["RESERVED_PREFIXES", "KeyEnvPolicy"]

# Upper-cased: configuration variables are read whatever their case.
RESERVED_PREFIXES = ("GATEWAY_", "REDIS_", "OTEL_")


def _setting_names() -> frozenset[str]:
    """Every variable a setting is read from (its aliases included), upper-cased."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    names = set()
    for field, info in Settings.model_fields.items():
        names.add(f"{prefix}{field}".upper())
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            names |= {c.upper() for c in alias.choices if isinstance(c, str)}
        elif isinstance(alias, str):
            names.add(alias.upper())
    return frozenset(names)


_RESERVED_NAMES = _setting_names()


@dataclass(frozen=True)
class KeyEnvPolicy:
    prefix: str = "AGENT_SECRET_"
    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, prefix: str, names: Iterable[str]) -> KeyEnvPolicy:
        return cls(prefix, frozenset(names))

    @staticmethod
    def reserved(name: str) -> bool:
        upper = name.upper()
        return upper.startswith(RESERVED_PREFIXES) or upper in _RESERVED_NAMES

    def allows(self, name: str) -> bool:
        if self.reserved(name):
            return False
        return name in self.names or (bool(self.prefix) and name.startswith(self.prefix))

    def read(self, name: str | None) -> str | None:
        """The variable's value when the name is allowed and set; else None."""
        if name is None or not self.allows(name):
            return None
        return os.environ.get(name)
