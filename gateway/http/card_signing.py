"""Agent card signatures (A2A 1.0 §8.4): a JWS over the card's RFC 8785 canonical JSON.

The payload is the card as a 1.0 ``AgentCard`` in proto JSON (fields of the proto only,
``cards.py``) without ``signatures`` and with every empty value (``""``, ``[]``, ``{}``,
nested ones too) dropped, canonicalised by JCS (``rfc8785``): the bytes the official 1.0
SDK verifies, which reads a card into the proto, writes it back to JSON, drops its empty
values and canonicalises the rest. The payload is not carried: a verifier rebuilds it from
the card. The protected header names the algorithm, ``typ`` ``JOSE``, the key (``kid``)
and where it is published (``jku``: the gateway's ``/.well-known/jwks.json``).

The key is the one that signs webhook requests (``gateway.push.signing``): the first of
``GATEWAY_PUSH_SIGNING_KEYS`` or the key shared through Redis, rotated the same way.
"""

from __future__ import annotations

from typing import Any

import rfc8785
from jwt import api_jws

from gateway.push.signing import SigningKey

__all__ = ["JWKS_PATH", "card_payload", "card_signature"]

# Where the gateway publishes its keys, relative to its public URL.
JWKS_PATH = "/.well-known/jwks.json"


def _without_empty(value: Any) -> Any:
    """``value`` less its empty strings, arrays and objects (None: nothing is left)."""
    if isinstance(value, dict):
        kept = {k: c for k, v in value.items() if (c := _without_empty(v)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [c for v in value if (c := _without_empty(v)) is not None]
        return items or None
    return None if isinstance(value, str) and not value else value


def card_payload(card: dict[str, Any]) -> bytes:
    """The signed bytes of a 1.0 card: canonical JSON without signatures or empty values."""
    unsigned = {k: v for k, v in card.items() if k != "signatures"}
    return rfc8785.dumps(_without_empty(unsigned) or {})


def card_signature(card: dict[str, Any], key: SigningKey, jku: str) -> dict[str, str]:
    """An ``AgentCardSignature`` of ``card`` (a 1.0 card) by ``key``, published at ``jku``."""
    header = {"typ": "JOSE", "kid": key.kid, "jku": jku}
    compact = api_jws.encode(card_payload(card), key.private, key.algorithm, headers=header)
    protected, _, signature = compact.split(".")
    return {"protected": protected, "signature": signature}
