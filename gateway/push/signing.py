"""The keys that sign webhook requests and agent cards, and the JWKS that publishes them.

Each request carries a JWT (``ES256`` for EC P-256 keys, ``RS256`` for RSA) whose claims
name the gateway (``iss``: its public URL), the webhook it is for (``aud``: the config's
URL, as set), the event (``jti``), the task, when it was signed, and the SHA-256 of the
exact body (``request_body_sha256``, hex), so a receiver that checks the signature against
the gateway's JWKS (``/.well-known/jwks.json``) knows the body came from the gateway,
unchanged, for it (a request replayed to another webhook names another audience).

The same key signs the agent cards (``gateway.http.card_signing``).

Keys come from ``GATEWAY_PUSH_SIGNING_KEYS`` (PEM files): the first signs, all are
published. Rotation without downtime: add the new key last (every replica publishes it),
then move it first (it signs), then drop the old one once receivers' caches have it. With no
files, one P-256 key is generated and kept in Redis (``SET NX``), so every replica signs
with the same key and publishes it.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.store.keys import PUSH_SIGNING_KEY

__all__ = ["SigningKey", "SigningKeys", "generate_pem"]

_LIFETIME = 300  # seconds a signature is valid for


@dataclass(frozen=True)
class SigningKey:
    kid: str
    algorithm: str
    private: Any
    jwk: dict[str, Any]

    @classmethod
    def from_pem(cls, pem: bytes) -> SigningKey:
        private = serialization.load_pem_private_key(pem, password=None)
        if isinstance(private, ec.EllipticCurvePrivateKey):
            if private.curve.name != "secp256r1":
                raise ValueError("EC signing keys must be P-256")
            algorithm, jwk = "ES256", json.loads(ECAlgorithm.to_jwk(private.public_key()))
        elif isinstance(private, rsa.RSAPrivateKey):
            algorithm, jwk = "RS256", json.loads(RSAAlgorithm.to_jwk(private.public_key()))
        else:
            raise ValueError("signing keys must be EC P-256 or RSA")
        kid = _thumbprint(jwk)
        return cls(kid, algorithm, private, jwk | {"kid": kid, "use": "sig", "alg": algorithm})


def _thumbprint(jwk: dict[str, Any]) -> str:
    """The RFC 7638 thumbprint of a public JWK (its key id)."""
    members = ("crv", "kty", "x", "y") if jwk["kty"] == "EC" else ("e", "kty", "n")
    canonical = json.dumps({k: jwk[k] for k in members}, separators=(",", ":"), sort_keys=True)
    digest = hashlib.sha256(canonical.encode()).digest()
    return jwt.utils.base64url_encode(digest).decode()


def generate_pem() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class SigningKeys:
    """The first key signs; all are published. Without keys, ``ensure`` takes the key
    shared through Redis (generating it if no replica did yet)."""

    def __init__(self, keys: list[SigningKey], issuer: str) -> None:
        self._keys, self._issuer = keys, issuer

    async def ensure(self, client: Any) -> None:
        if self._keys:
            return
        await client.set(PUSH_SIGNING_KEY, generate_pem(), nx=True)
        self._keys = [SigningKey.from_pem(await client.get(PUSH_SIGNING_KEY))]

    @classmethod
    def from_files(cls, paths: list[str], issuer: str) -> SigningKeys:
        return cls([SigningKey.from_pem(Path(p).read_bytes()) for p in paths], issuer)

    @property
    def signer(self) -> SigningKey | None:
        """The key that signs (None while ``ensure`` has not taken the shared one)."""
        return self._keys[0] if self._keys else None

    def jwks(self) -> dict[str, Any]:
        return {"keys": [k.jwk for k in self._keys]}

    def sign(self, body: bytes, event_id: str, task_id: str, audience: str) -> str:
        key = self._keys[0]
        now = int(time.time())
        claims = {
            "iss": self._issuer,
            "aud": audience,
            "iat": now,
            "exp": now + _LIFETIME,
            "jti": event_id,
            "taskId": task_id,
            "request_body_sha256": hashlib.sha256(body).hexdigest(),
        }
        return jwt.encode(claims, key.private, algorithm=key.algorithm, headers={"kid": key.kid})
