"""The encryption keys a starting process needs: present with REDIS_URL, and opening what the
Redis holds (``store/key_registry.py``). Each refusal is one log line, never a key."""

from __future__ import annotations

import asyncio
import logging

from gateway.settings import Settings

__all__ = ["keys_agree", "keys_missing"]

log = logging.getLogger("gateway")


def keys_missing(settings: Settings) -> bool:
    if settings.encryption == "on" and settings.encryption_keys is None:
        log.error(
            "GATEWAY_ENCRYPTION_KEYS is required with REDIS_URL: generate a keyring with "
            "`gateway encryption generate-key`, or set GATEWAY_ENCRYPTION=off to store content "
            "in clear"
        )
        return True
    return False


async def _verify_keys(settings: Settings) -> None:
    from gateway.runtime.connections import Connections
    from gateway.store.key_registry import KeyRegistry
    from gateway.store.sealing import sealer_for

    connections = Connections.command(settings)
    try:
        await KeyRegistry(connections.client, sealer_for(settings)).verify()
    finally:
        await connections.close()


def keys_agree(settings: Settings) -> bool:
    """Whether GATEWAY_ENCRYPTION_KEYS opens what the Redis holds (``key_registry.py``);
    logged, in one line, when not. An unreachable Redis is the runtime's to report."""
    from redis.exceptions import RedisError

    from gateway.store.key_registry import ForeignKeyError

    try:
        asyncio.run(_verify_keys(settings))
    except ForeignKeyError as exc:
        log.error("refusing to start: %s", exc)
        return False
    except (RedisError, OSError):
        pass
    return True
