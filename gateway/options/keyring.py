"""The encryption keyring (``GATEWAY_ENCRYPTION_KEYS``): read and generated here, below
``settings`` (which checks it at start-up) and the store's sealing (which uses it)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

__all__ = ["Keyring", "KeyringError", "fingerprint", "generate_keyring"]

_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,32}")


class KeyringError(ValueError):
    """GATEWAY_ENCRYPTION_KEYS is not a usable keyring (the message never quotes a key)."""


@dataclass(frozen=True)
class Keyring:
    """Key id -> 256-bit key; the first is current (seals new writes)."""

    keys: Mapping[str, bytes]
    current: str

    @classmethod
    def parse(cls, text: str) -> Keyring:
        """A JSON object ``{"<id>": "<base64 of 32 bytes>", ...}``, or the path of a file
        holding one."""
        text = text.strip()
        if not text.startswith("{"):
            try:
                text = Path(text).read_text().strip()
            except OSError as exc:
                raise KeyringError("not a JSON object, nor a readable file") from exc
        try:
            raw = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise KeyringError("not valid JSON") from exc
        if not isinstance(raw, dict) or not raw:
            raise KeyringError("must be a non-empty JSON object of key id -> key")
        keys: dict[str, bytes] = {}
        for key_id, value in raw.items():
            if not _KEY_ID.fullmatch(key_id):
                raise KeyringError("key ids are 1-32 of A-Z a-z 0-9 . _ -")
            try:
                key = base64.b64decode(str(value).encode(), altchars=b"-_", validate=True)
            except (binascii.Error, ValueError) as exc:
                raise KeyringError(f"key {key_id} is not base64") from exc
            if len(key) != 32:
                raise KeyringError(f"key {key_id} must be 32 bytes (256 bits)")
            keys[key_id] = key
        return cls(keys, next(iter(keys)))

    def fingerprints(self) -> dict[str, str]:
        """Key id -> ``fingerprint`` of each key."""
        return {key_id: fingerprint(key_id, key) for key_id, key in self.keys.items()}


def fingerprint(key_id: str, key: bytes) -> str:
    """What tells two keys of one id apart without revealing either: an HMAC keyed by the
    key itself (of a fixed label and the id), so it helps no guess of the key."""
    label = b"gateway key fingerprint|" + key_id.encode()
    return hmac.new(key, label, hashlib.sha256).hexdigest()


def generate_keyring(key_id: str = "k1", existing: str | None = None) -> str:
    """A keyring (JSON) whose current key is a new random one, followed by ``existing``'s."""
    keys = {key_id: base64.b64encode(secrets.token_bytes(32)).decode()}
    if existing:
        keys.update({k: v for k, v in orjson.loads(existing).items() if k != key_id})
    return orjson.dumps(keys).decode()
