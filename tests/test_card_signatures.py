"""Signed agent cards (A2A 1.0 §8.4), checked with a JWS library the gateway does not sign
with (joserfc) against the keys of ``/.well-known/jwks.json``.

The signed content is rebuilt here as a 1.0 verifier rebuilds it: the served card read
into the ``AgentCard`` message of ``a2a.proto`` (unknown fields, the 0.3 ones, ignored),
written back as proto JSON, less ``signatures`` and empty values, canonicalised (RFC 8785).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import rfc8785
from google.protobuf.json_format import MessageToDict, ParseDict
from joserfc import jws
from joserfc.errors import BadSignatureError
from joserfc.jwk import KeySet

from gateway.grpcapi.proto import a2a_pb2
from gateway.push.signing import SigningKey, generate_pem
from tests.a2a_schema import assert_a2a
from tests.conftest import AppFactory

CARDS = (
    "/.well-known/agent-card.json",
    "/agent-card.json",
    "/agents/echo/.well-known/agent-card.json",
    "/agents/echo/agent-card.json",
)


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: c for k, v in value.items() if (c := _without_empty(v)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [c for v in value if (c := _without_empty(v)) is not None]
        return items or None
    return None if value == "" else value


def as_v1(card: dict[str, Any]) -> dict[str, Any]:
    """The card as a 1.0 reader has it: the proto's fields, set ones only."""
    message = ParseDict(card, a2a_pb2.AgentCard(), ignore_unknown_fields=True)
    return MessageToDict(message)


def payload(card: dict[str, Any]) -> bytes:
    unsigned = {k: v for k, v in as_v1(card).items() if k != "signatures"}
    return rfc8785.dumps(_without_empty(unsigned))


def header(signature: dict[str, str]) -> dict[str, Any]:
    protected = signature["protected"]
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(protected + "=" * 4))
    return decoded


def verify(card: dict[str, Any], jwks: dict[str, Any]) -> None:
    """Raises unless a signature of ``card`` verifies with a key of ``jwks``."""
    keys = KeySet.import_key_set(jwks)  # type: ignore[arg-type]
    (signature,) = card["signatures"]
    detached = f"{signature['protected']}..{signature['signature']}"
    jws.deserialize_compact(detached, keys, algorithms=["ES256", "RS256"], payload=payload(card))


async def _card_and_keys(gw: httpx.AsyncClient, path: str) -> tuple[dict[str, Any], Any]:
    card: dict[str, Any] = (await gw.get(path)).json()
    jwks = (await gw.get(header(card["signatures"][0])["jku"].removeprefix("http://gw"))).json()
    return card, jwks


@pytest.mark.parametrize("path", CARDS)
async def test_every_card_is_signed_with_a_published_key(
    keyed: httpx.AsyncClient, path: str
) -> None:
    card, jwks = await _card_and_keys(keyed, path)
    assert_a2a("AgentCard", card)  # the 0.3 schema takes the signed card too
    (signature,) = card["signatures"]
    assert header(signature) == {
        "alg": "ES256",
        "typ": "JOSE",
        "kid": jwks["keys"][0]["kid"],
        "jku": "http://gw/.well-known/jwks.json",
    }
    verify(card, jwks)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: c.update(name="Another agent"),
        lambda c: c["supportedInterfaces"][0].update(url="https://attacker.example"),
        lambda c: c["capabilities"].update(pushNotifications=False),
        lambda c: c["skills"].append({"id": "x", "name": "x", "description": "x", "tags": ["x"]}),
        lambda c: c["securitySchemes"].pop("apiKey"),
        lambda c: c["securitySchemes"]["apiKey"]["apiKeySecurityScheme"].update(name="X-Other"),
        lambda c: c.update(iconUrl="https://attacker.example/icon.png"),
    ],
)
async def test_a_changed_card_fails_verification(keyed: httpx.AsyncClient, tamper: Any) -> None:
    card, jwks = await _card_and_keys(keyed, "/agents/echo/.well-known/agent-card.json")
    verify(card, jwks)
    tamper(card)
    with pytest.raises(BadSignatureError):
        verify(card, jwks)


async def test_the_signed_content_is_the_1_0_card_the_proto_reads(
    keyed: httpx.AsyncClient,
) -> None:
    """What the gateway signs has no field the proto lacks and no empty value: a 1.0 card
    read into the proto and written back is the card the gateway built."""
    from gateway.http.card_signing import card_payload

    for path in CARDS:
        card = (await keyed.get(path)).json()
        assert card_payload(as_v1(card)) == payload(card)
        # the 0.3 fields are the ones the proto drops
        assert set(card) - set(as_v1(card)) == {
            "protocolVersion", "url", "preferredTransport", "additionalInterfaces",
            "supportsAuthenticatedExtendedCard", "security",
        }  # fmt: skip


async def test_open_mode_cards_are_signed_too(client: httpx.AsyncClient) -> None:
    card, jwks = await _card_and_keys(client, "/.well-known/agent-card.json")
    assert "securitySchemes" not in card
    verify(card, jwks)


async def test_the_first_configured_key_signs_and_all_are_published(
    make_app: AppFactory, tmp_path: Path
) -> None:
    """Rotation as for webhook requests: the JWKS has every key, the first one signs; a
    card verifies against the JWKS, not against a key that is not the signer."""
    paths, kids = [], []
    for name in ("new", "old"):
        pem, path = generate_pem(), tmp_path / f"{name}.pem"
        path.write_bytes(pem)
        paths.append(str(path))
        kids.append(SigningKey.from_pem(pem).kid)
    async with make_app(
        push_signing_keys=",".join(paths), public_url="https://gw.hospital.example"
    ) as gw:
        card = (await gw.get("/agents/echo/agent-card.json")).json()
        jwks = (await gw.get("/.well-known/jwks.json")).json()
    assert [k["kid"] for k in jwks["keys"]] == kids
    assert header(card["signatures"][0])["kid"] == kids[0]
    assert (
        header(card["signatures"][0])["jku"] == "https://gw.hospital.example/.well-known/jwks.json"
    )
    verify(card, jwks)
    with pytest.raises(BadSignatureError):
        verify(card, {"keys": [k | {"kid": kids[0]} for k in jwks["keys"][1:]]})
