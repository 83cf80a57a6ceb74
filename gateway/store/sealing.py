"""Content at rest, sealed: AES-256-GCM (``cryptography``'s AESGCM) with associated data.

Pure logic, no I/O: the store seals what it writes and opens what it reads, so Redis (and
its files, replicas and backups) holds ciphertext for message parts, artifacts, status
messages and metadata. Ids, states, timestamps and counters stay clear for the scripts.

A sealed value carries the id of the key that sealed it, so keys rotate: new writes use the
current (first) key, values of older keys still open while those keys are configured, and
``gateway encryption rotate-data`` re-seals them with the current one. The associated data binds
each value to its user's key prefix (the digest of tenant and user), its context and its
field: a value copied to another user's, context's or field's place does not open
(``StoredDataUnreadableError``), it never decrypts to someone else's content.

Binary form (hash values): ``MAGIC | len(key id) | key id | nonce (12) | ciphertext+tag``.
Text form (artifacts, which the scripts append to a bracketed, comma-separated list):
``g1:<key id>:<base64 of nonce | ciphertext+tag>``. Clear values (JSON, written with
encryption off or before it was on) begin with ``{`` or ``[`` and are returned as they are.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from gateway.entropy import random_bytes
from gateway.errors import StoredDataUnreadableError
from gateway.options.keyring import Keyring, KeyringError, generate_keyring

__all__ = [
    "Keyring",
    "KeyringError",
    "Sealer",
    "context_of",
    "generate_keyring",
    "is_sealed",
    "sealed_length",
    "sealer_for",
]

MAGIC = b"\x00g1"
TOKEN = b"g1:"
_NONCE = 12
_TAG = 16


def sealer_for(settings: Any) -> Sealer:
    """The sealer of a configuration (``Settings``): its keyring, sealing writes unless
    encryption is off (sealed values still open while their keys are configured)."""
    keys = settings.encryption_keys
    keyring = Keyring.parse(keys.get_secret_value()) if keys is not None else None
    if settings.encryption == "off":
        return Sealer(keyring, seal_writes=False)
    if keyring is None:
        raise KeyringError(
            "GATEWAY_ENCRYPTION_KEYS is required with REDIS_URL (or GATEWAY_ENCRYPTION=off)"
        )
    return Sealer(keyring)


def is_sealed(value: bytes) -> bool:
    return value.startswith(MAGIC) or value.startswith(TOKEN)


def key_id_of(value: bytes) -> str | None:
    """The id of the key that sealed ``value``; None for a clear value."""
    if value.startswith(MAGIC):
        n = value[len(MAGIC)]
        return value[len(MAGIC) + 1 : len(MAGIC) + 1 + n].decode()
    if value.startswith(TOKEN):
        return value[len(TOKEN) :].split(b":", 1)[0].decode()
    return None


def sealed_length(view: memoryview) -> int:
    """How long the clear value of a binary sealed value is (whether it opens or not)."""
    header = len(MAGIC) + 1 + view[len(MAGIC)] if len(view) > len(MAGIC) else len(view)
    return max(0, len(view) - header - _NONCE - _TAG)


def context_of(prefix: str, context_id: str, field: str) -> bytes:
    """The associated data of a value: user key prefix, context, field."""
    return f"gw1|{prefix}|{context_id}|{field}".encode()


class Sealer:
    """Seals with the current key when ``seal_writes``; opens with any key of the ring."""

    def __init__(self, keyring: Keyring | None, *, seal_writes: bool = True) -> None:
        self.keyring = keyring
        self.seal_writes = seal_writes and keyring is not None
        self._ciphers = {k: AESGCM(v) for k, v in (keyring.keys.items() if keyring else ())}
        self._current = keyring.current.encode() if keyring else b""
        self._header = MAGIC + bytes([len(self._current)]) + self._current

    @property
    def current(self) -> str | None:
        return self.keyring.current if self.keyring else None

    # -- sealing ---------------------------------------------------------------------------

    def seal(self, plain: bytes, aad: bytes) -> bytes:
        if not self.seal_writes or not plain:
            return plain
        nonce = random_bytes(_NONCE)
        sealed = self._ciphers[self._current.decode()].encrypt(nonce, plain, aad)
        return self._header + nonce + sealed

    def seal_token(self, plain: bytes, aad: bytes) -> bytes:
        """The text form, for values the scripts join with commas (artifacts)."""
        if not self.seal_writes:
            return plain
        nonce = random_bytes(_NONCE)
        sealed = self._ciphers[self._current.decode()].encrypt(nonce, plain, aad)
        return TOKEN + self._current + b":" + base64.b64encode(nonce + sealed)

    # -- opening ---------------------------------------------------------------------------

    def open(self, value: bytes, aad: bytes) -> bytes:
        """The clear value (a clear value as it is); ``StoredDataUnreadableError`` when it
        was sealed for another place, or with a key that is not configured."""
        if value.startswith(MAGIC):
            n = value[len(MAGIC)]  # the key id's length
            start = len(MAGIC) + 1
            key_id = value[start : start + n].decode(errors="replace")
            body = memoryview(value)[start + n :]  # no copy of a large value (vectors)
            return self._decrypt(key_id, bytes(body[:_NONCE]), body[_NONCE:], aad)
        if value.startswith(TOKEN):
            return self.open_token(value, aad)
        return value

    def open_view(self, view: memoryview, aad: bytes) -> bytes:
        """``open`` of a binary sealed value inside a larger buffer (a vector frame), with
        no copy of it."""
        if bytes(view[: len(MAGIC)]) != MAGIC:
            raise StoredDataUnreadableError()
        n = view[len(MAGIC)]
        start = len(MAGIC) + 1
        key_id = bytes(view[start : start + n]).decode(errors="replace")
        body = view[start + n :]
        return self._decrypt(key_id, bytes(body[:_NONCE]), body[_NONCE:], aad)

    def open_token(self, token: bytes, aad: bytes) -> bytes:
        key_id, _, blob = token[len(TOKEN) :].partition(b":")
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            raise StoredDataUnreadableError() from None
        return self._decrypt(key_id.decode(errors="replace"), raw[:_NONCE], raw[_NONCE:], aad)

    def _decrypt(self, key_id: str, nonce: bytes, sealed: bytes | memoryview, aad: bytes) -> bytes:
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise StoredDataUnreadableError()
        try:
            return cipher.decrypt(nonce, sealed, aad)
        except Exception:  # InvalidTag: moved, altered, or another key of the same id
            raise StoredDataUnreadableError() from None

    def open_optional(self, value: bytes | None, aad: bytes) -> bytes | None:
        return None if value is None else self.open(value, aad)

    # -- artifacts: a bracketed list the scripts append to --------------------------------

    def seal_artifacts(self, artifacts: list[bytes], aad: bytes) -> list[bytes]:
        return [self.seal_token(a, aad) for a in artifacts]

    def open_artifacts(
        self,
        stored: bytes | None,
        aad: bytes,
        known: Mapping[bytes, bytes] | None = None,
        unreadable: Callable[[int], bytes] | None = None,
    ) -> bytes | None:
        """A task's stored artifact list (sealed tokens, clear objects, or both) as the
        clear JSON array; ``known``: tokens the caller has just sealed, with their clear
        values (not opened again); ``unreadable``: the stand-in for the n-th artifact when
        it does not open (None: ``StoredDataUnreadableError``)."""
        if stored is None or stored in (b"[]", b""):
            return stored
        if not stored.startswith(b"[") or TOKEN not in stored:
            return stored  # all clear
        items = split_artifacts(stored)
        known = known or {}
        opened = []
        for n, item in enumerate(items):
            try:
                opened.append(known.get(item) or self.open(item, aad))
            except StoredDataUnreadableError:
                if unreadable is None:
                    raise
                opened.append(unreadable(n))
        return b"[" + b",".join(opened) + b"]"

    def reseal(self, value: bytes, aad: bytes) -> bytes:
        """``value`` sealed with the current key (opened first if sealed)."""
        return self.seal(self.open(value, aad), aad)


def split_artifacts(stored: bytes) -> list[bytes]:
    """The elements of a stored artifact list: sealed tokens and clear JSON objects."""
    body = stored[1:-1]
    if b"{" not in body:  # tokens only: base64 holds no comma
        return [t for t in body.split(b",") if t]
    text, out, i = body.decode(), [], 0
    decoder = json.JSONDecoder()
    while i < len(text):
        if text[i] == ",":
            i += 1
        elif text[i] == "{":
            _, end = decoder.raw_decode(text, i)
            out.append(text[i:end].encode())
            i = end
        else:
            end = text.find(",", i)
            end = len(text) if end < 0 else end
            out.append(text[i:end].encode())
            i = end
    return out
