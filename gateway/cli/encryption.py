"""`gateway encryption`: a new keyring for content at rest, and the re-encryption of stored
data with the current key."""

from __future__ import annotations

import asyncio
import logging

from gateway.cli.embedded import attach
from gateway.settings import Settings

__all__ = ["encryption"]

log = logging.getLogger("gateway")


async def _rotate(settings: Settings) -> None:
    """``rotate_data`` over the Redis the settings name, to their current key."""
    from gateway.runtime.connections import Connections
    from gateway.store.rotation import rotate_data
    from gateway.store.sealing import sealer_for

    connections = Connections.command(settings)
    try:
        await rotate_data(connections.client, sealer_for(settings))
    finally:
        await connections.close()


def encryption(settings: Settings, action: str, key_id: str) -> int:
    if action == "generate-key":
        from gateway.store.sealing import generate_keyring

        print(generate_keyring(key_id))
        return 0
    attached = attach(settings)
    if attached is None:
        return 2
    if attached.encryption_keys is None:
        log.error("no keys to rotate to: GATEWAY_ENCRYPTION_KEYS is unset")
        return 2
    from gateway.store.sealing import KeyringError

    try:
        asyncio.run(_rotate(attached))
    except KeyringError as exc:
        log.error("rotation refused: %s", exc)
        return 2
    return 0
