"""Server-generated identifiers: random UUIDv4 (122 random bits from the OS CSPRNG,
through ``gateway.entropy``)."""

from __future__ import annotations

from gateway.entropy import random_bytes

__all__ = ["new_id"]


def new_id() -> str:
    """A random UUID (version 4, RFC 9562 variant) in its canonical form: what
    ``str(uuid.uuid4())`` gives, written from the bytes without building a ``UUID``."""
    raw = bytearray(random_bytes(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # variant 10xx
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
