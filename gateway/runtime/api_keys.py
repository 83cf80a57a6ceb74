"""The API-key service, as the app and `gateway keys` both build it."""

from __future__ import annotations

from gateway.service.keys import KeyService
from gateway.settings import Settings
from gateway.store.apikeys_store import ApiKeyStore
from gateway.store.redis_store import Store

__all__ = ["key_service"]


def key_service(
    settings: Settings, keys: ApiKeyStore, contexts: Store | None = None
) -> KeyService | None:
    """The managed keys under ``GATEWAY_API_KEY_SECRET`` (None: it is unset, no key is
    managed). ``contexts``: where users' data is, checked over HTTP (None: the command
    line, which needs no such check)."""
    if settings.api_key_secret is None:
        return None
    return KeyService(
        keys,
        settings.api_key_secret.get_secret_value().encode(),
        frozenset((entry.tenant, entry.user) for entry in settings.api_keys.values()),
        contexts,
    )
