"""An identity provider stand-in on 127.0.0.1: a JWKS endpoint serving public keys
generated in the test, and the matching private keys to sign tokens with.

``publish(kid)`` adds a key to the document (``withdraw`` removes one), ``fetches`` counts
the requests the JWKS endpoint answered, ``token(...)`` signs claims with a key (by default
a valid token for ``ISSUER`` / ``AUDIENCE``), and ``forged(...)`` builds the tokens no
library would sign: ``alg: none`` and HS256 keyed with the RSA public key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.http_double import ServedDouble

ISSUER = "https://idp.hospital.example/realms/clinical"
AUDIENCE = "gateway"
ALGORITHM_OF = {"rsa": "RS256", "ec": "ES256", "ed": "EdDSA"}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class IdentityProvider(ServedDouble):
    def __init__(self) -> None:
        super().__init__()
        self.private: dict[str, Any] = {}
        self.kinds: dict[str, str] = {}
        self.published: list[str] = []
        self.fetches = 0
        self.serve(Starlette(routes=[Route("/jwks", self._jwks)]))

    @property
    def jwks_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks"

    def issuer(self, **fields: Any) -> dict[str, Any]:
        """A GATEWAY_JWT_ISSUERS entry for this provider (tenant from the 'tenant' claim)."""
        return {
            "issuer": ISSUER,
            "jwks_url": self.jwks_url,
            "audience": AUDIENCE,
            "tenant_claim": "tenant",
            **fields,
        }

    def generate(self, kid: str, kind: str = "rsa") -> None:
        if kind == "rsa":
            self.private[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif kind == "ec":
            self.private[kid] = ec.generate_private_key(ec.SECP256R1())
        else:
            self.private[kid] = ed25519.Ed25519PrivateKey.generate()
        self.kinds[kid] = kind

    def publish(self, kid: str, kind: str = "rsa") -> None:
        if kid not in self.private:
            self.generate(kid, kind)
        self.published.append(kid)

    def withdraw(self, kid: str) -> None:
        self.published.remove(kid)

    def _public_jwk(self, kid: str) -> dict[str, Any]:
        public = self.private[kid].public_key()
        kind = self.kinds[kid]
        algorithm = {"rsa": RSAAlgorithm, "ec": ECAlgorithm, "ed": OKPAlgorithm}[kind]
        jwk: dict[str, Any] = algorithm.to_jwk(public, as_dict=True)  # type: ignore[attr-defined]
        return {**jwk, "kid": kid, "use": "sig", "alg": ALGORITHM_OF[kind]}

    async def _jwks(self, request: Request) -> Response:
        self.fetches += 1
        return JSONResponse({"keys": [self._public_jwk(k) for k in self.published]})

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "client-ehr",
            "tenant": "t1",
            "iat": now,
            "nbf": now,
            "exp": now + 300,
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def token(self, kid: str = "r1", **overrides: Any) -> str:
        algorithm = ALGORITHM_OF[self.kinds[kid]]
        return jwt.encode(
            self.claims(**overrides), self.private[kid], algorithm=algorithm, headers={"kid": kid}
        )

    def forged(self, alg: str, kid: str = "r1", **overrides: Any) -> str:
        """A token with ``alg`` 'none' (no signature) or 'HS256' keyed with the PEM of
        ``kid``'s public key (the algorithm-confusion attack)."""
        header = _b64(json.dumps({"alg": alg, "typ": "JWT", "kid": kid}).encode())
        payload = _b64(json.dumps(self.claims(**overrides)).encode())
        signing_input = f"{header}.{payload}".encode()
        if alg == "none":
            return f"{header}.{payload}."
        pem = (
            self.private[kid]
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        signature = hmac.new(pem, signing_input, hashlib.sha256).digest()
        return f"{header}.{payload}.{_b64(signature)}"
