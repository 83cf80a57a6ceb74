"""The Redis of a command without REDIS_URL: the embedded redis-server that `gateway serve`
starts in the data directory, which `gateway worker` and `gateway encryption` attach to, and
what it turns on by default (file rewrites after a scrub, a generated keyring)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from gateway import embedded_redis
from gateway.cli.keyring_checks import keys_missing
from gateway.configuration import shown_url
from gateway.embedded_redis import EmbeddedRedis
from gateway.settings import Settings

__all__ = ["KEYS_FILE", "AlreadyServed", "attach", "embedded_defaults", "with_redis"]

log = logging.getLogger("gateway")


# In the data directory, 0600: the generated keyring of a gateway on the embedded Redis
# whose GATEWAY_ENCRYPTION_KEYS is unset.
KEYS_FILE = "encryption-keys.json"


class AlreadyServed(Exception):
    """Another `gateway serve` runs the embedded Redis of the data directory."""


def with_redis(settings: Settings) -> tuple[Settings, EmbeddedRedis | None]:
    """Without a Redis URL, a new embedded redis-server in the data directory (stopped by
    the caller); refused (``AlreadyServed``) while another gateway process runs one there."""
    if settings.redis_url is not None:
        return settings, None
    embedded_redis.private_directory(Path(settings.data_dir))
    data = Path(settings.data_dir) / "redis"
    url, embedded = embedded_redis.shared(data, appendfsync=settings.redis_appendfsync)
    if embedded is None:
        raise AlreadyServed(str(data))
    log.info("embedded redis-server started", extra={"port": embedded.port})
    return settings.model_copy(update={"redis_url": url, **embedded_defaults(settings)}), embedded


def embedded_defaults(settings: Settings) -> dict[str, object]:
    """What the embedded Redis turns on by default: rewriting its files after a scrub, and
    encryption with a keyring generated into the data directory (``KEYS_FILE``, 0600)."""
    update: dict[str, object] = {}
    if settings.scrub_rewrite == "auto":
        update["scrub_rewrite"] = "on"
    if settings.encryption == "on" and settings.encryption_keys is None:
        from pydantic import SecretStr

        from gateway.store.sealing import generate_keyring

        path = embedded_redis.private_directory(Path(settings.data_dir)) / KEYS_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(generate_keyring() + "\n")
            log.info("encryption key generated", extra={"path": str(path)})
        update["encryption_keys"] = SecretStr(str(path.resolve()))
    return update


def attach(settings: Settings) -> Settings | None:
    """REDIS_URL, or the embedded Redis a `gateway serve` runs for the data directory (None,
    logged, when there is neither)."""
    if settings.redis_url is None:
        # A private Redis would never see the server's jobs: use the server's, or none.
        data = Path(settings.data_dir) / "redis"
        url = embedded_redis.running(data)
        if url is None:
            log.error(
                "no Redis to work from: REDIS_URL is unset and no embedded redis-server "
                "runs for this data directory; start `gateway serve` with the same "
                "GATEWAY_DATA_DIR first, or set REDIS_URL",
                extra={"data_dir": str(data)},
            )
            return None
        log.info(
            "using the embedded redis-server of the data directory",
            extra={"url": shown_url(url)},
        )
        return settings.model_copy(update={"redis_url": url, **embedded_defaults(settings)})
    return None if keys_missing(settings) else settings
