"""API keys managed in Redis: their shape, their keyed hash, and what is kept of them.

A key is ``gwk_<id>_<secret>``: the id (12 hex characters) finds its record, the secret
(32 random bytes, base64url) proves it. Only an HMAC-SHA256 of the whole key under the
server's secret (``GATEWAY_API_KEY_SECRET``) is stored, compared in constant time: a copy
of Redis does not give anyone a working key, nor lets them test guesses without the
server's secret. The key itself is shown once, when it is created.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

__all__ = ["PREFIX", "CreatedKey", "KeyRecord", "key_mac", "new_key", "parse_key"]

PREFIX = "gwk_"
_SHAPE = re.compile(r"gwk_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")


def new_key() -> tuple[str, str]:
    """A fresh (id, key)."""
    key_id = secrets.token_hex(6)
    return key_id, f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def parse_key(key: str) -> str | None:
    """The id of a well-formed managed key, else None."""
    found = _SHAPE.fullmatch(key)
    return found[1] if found else None


def key_mac(secret: bytes, key: str) -> str:
    return hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class KeyRecord:
    """What is stored of a key (never the key)."""

    id: str
    tenant: str
    user: str
    mac: str
    roles: tuple[str, ...] = ()
    name: str = ""
    created_ms: int = 0
    expires_ms: int = 0  # 0: never
    revoked_ms: int = 0  # 0: not revoked
    last_used_ms: int = 0
    replaced_by: str = ""  # the id of the key a rotation made
    # Who made it: "http" (a tenant admin, over /keys) or "cli" (the operator, `gateway
    # keys`); "" for keys made before this was recorded, treated as the operator's.
    origin: str = ""

    def matches(self, secret: bytes, key: str) -> bool:
        return hmac.compare_digest(self.mac, key_mac(secret, key))

    def usable(self, now_ms: int) -> bool:
        revoked = self.revoked_ms and self.revoked_ms <= now_ms
        expired = self.expires_ms and self.expires_ms <= now_ms
        return not (revoked or expired)


@dataclass(frozen=True)
class CreatedKey:
    """A key just made (created or rotated): its record, and the key itself, shown once."""

    record: KeyRecord
    key: str
