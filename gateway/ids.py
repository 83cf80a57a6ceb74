"""Server-generated identifiers: random UUIDv4 (122 random bits from the OS CSPRNG)."""

from __future__ import annotations

import uuid

__all__ = ["new_id"]


def new_id() -> str:
    return str(uuid.uuid4())
