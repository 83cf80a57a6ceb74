"""Signed agent cards as the official a2a-sdk 1.x client checks them.

Run in the a2a-sdk 1.x environment: ``python a2a_1x_card.py BASE_URL API_KEY``. For the
default agent and ``echo``, the client resolves the card with signature verification on
(the key fetched from the ``jku`` the signature names, picked by its ``kid``) and sends a
message through the client made from it; then the card with one field changed, and the
card without its signatures, go through the same verifier. Prints one JSON object: what
the client saw.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import httpx
from a2a.client import ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import SendMessageRequest, TaskState
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from a2a_1x_grpc import client_config
from google.protobuf.json_format import ParseDict
from jwt import PyJWK

# A change to each part of the 1.0 card a client acts on.
TAMPERS = {
    "name": lambda c: c.update(name="Another agent"),
    "interface": lambda c: c["supportedInterfaces"][0].update(url="https://attacker.example"),
    "capabilities": lambda c: c["capabilities"].update(streaming=False),
    "skill": lambda c: c["skills"][0].update(description="Does something else."),
    # The SDK reads a scheme with a 0.3 ``type`` from its 0.3 fields (the 1.0 member beside
    # them holds the same values).
    "scheme": lambda c: c["securitySchemes"]["apiKey"].update(name="X-Other"),
}


def verifier(fetched: list[str]) -> Any:
    """The SDK's verifier, its keys from the JWKS a signature names (``fetched``: the
    ``jku`` URLs read)."""

    def key(kid: str | None, jku: str | None) -> PyJWK:
        assert jku is not None, "the signature names no jku"
        fetched.append(jku)
        jwks = httpx.get(jku, timeout=30).json()
        (found,) = [k for k in jwks["keys"] if k["kid"] == kid]
        return PyJWK(found)

    return create_signature_verifier(key, ["ES256", "RS256"])


def refusal(verify: Any, card_json: dict[str, Any]) -> str:
    try:
        verify(parse_agent_card(card_json))
    except SignatureVerificationError as e:
        return type(e).__name__
    return "accepted"


async def check(http: httpx.AsyncClient, key: str, url: str) -> dict[str, Any]:
    fetched: list[str] = []
    verify = verifier(fetched)
    client = await ClientFactory(
        client_config(http, key, "jsonrpc", streaming=False)
    ).create_from_url(url, signature_verifier=verify)
    body = {"message": {"role": "ROLE_USER", "messageId": str(uuid.uuid4()),
                        "parts": [{"text": "signed"}]}}  # fmt: skip
    state = None
    async for event in client.send_message(ParseDict(body, SendMessageRequest())):
        state = TaskState.Name(event.task.status.state)
        break
    raw = (await http.get(f"{url}/.well-known/agent-card.json")).json()
    tampered = {}
    for name, tamper in TAMPERS.items():
        changed = json.loads(json.dumps(raw))
        tamper(changed)
        tampered[name] = refusal(verify, changed)
    unsigned = {k: v for k, v in raw.items() if k != "signatures"}
    return {
        "state": state,
        "jku": fetched[0],
        "again": refusal(verify, raw),
        "tampered": tampered,
        "unsigned": refusal(verify, unsigned),
    }


async def main(base: str, key: str) -> dict[str, Any]:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        return {url: await check(http, key, url) for url in (base, f"{base}/agents/echo")}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
