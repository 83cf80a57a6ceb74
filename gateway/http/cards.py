"""AgentCards generated from the agents and the auth mode: one card for A2A 0.3 and 1.0.

Both versions' clients read the same document: the card is a 1.0 ``AgentCard`` in proto
JSON with the 0.3 fields beside it, as the official 1.0 SDK's server writes one. 0.3
clients take ``url`` with ``preferredTransport`` and ``additionalInterfaces``, ``security``
and each scheme's ``type``; 1.0 clients take ``supportedInterfaces``,
``securityRequirements`` and each scheme's oneof member. The 1.0 card alone is what a
signature covers (``card_signing.py``): a 1.0 reader drops the 0.3 fields. Every binding is
named at one URL for both versions, so a client that lets a 0.3 URL win lands on the same
endpoint: JSON-RPC at the agent base (the method name tells the version) and the
proto-JSON REST binding at ``{base}/a2a`` (0.3 under ``/v1/...``, 1.0 without). The
Corti-style REST at ``{base}/v1/...`` is documented, not advertised: its JSON is the
canonical 0.3 spelling, which the SDKs' REST clients do not parse. With the gRPC binding
on (``GATEWAY_GRPC_PORT``), a 1.0 ``GRPC`` interface names its ``host:port`` and, for an
agent other than the default one, the ``tenant`` that routes to it (``agents/{id}``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from gateway import __version__
from gateway.agents.base import Agent

__all__ = ["GRPC_AGENT_TENANT", "REST_SUFFIX", "CardSigner", "agent_card"]

# Where an agent's proto-JSON REST binding lives, relative to its base URL.
REST_SUFFIX = "/a2a"
# The gRPC ``tenant`` field that routes a call to an agent (gateway/grpcapi/edge.py).
GRPC_AGENT_TENANT = "agents/{agent_id}"

# Each scheme in both spellings: 1.0 (the proto's oneof member) and 0.3 (``type`` with
# the member's fields beside it), merged as the official 1.0 SDK's server writes them.
_SCHEMES_V1: dict[str, dict[str, Any]] = {
    "bearer": {
        "httpAuthSecurityScheme": {
            "scheme": "bearer",
            "description": "A gateway API key sent as a bearer token.",
        },
    },
    "apiKey": {
        "apiKeySecurityScheme": {
            "location": "header",
            "name": "X-API-Key",
            "description": "A gateway API key.",
        },
    },
}
_SCHEMES_V03: dict[str, dict[str, Any]] = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "A gateway API key sent as a bearer token.",
    },
    "apiKey": {
        "type": "apiKey",
        "in": "header",
        "name": "X-API-Key",
        "description": "A gateway API key.",
    },
}
# 1.0 ``securityRequirements``: either scheme, no scopes.
_SECURITY_REQUIREMENTS: list[dict[str, Any]] = [
    {"schemes": {"bearer": {"list": []}}},
    {"schemes": {"apiKey": {"list": []}}},
]
# Signs a card (its 1.0 ``AgentCard``, before the 0.3 fields join it): its ``signatures``.
CardSigner = Callable[[dict[str, Any]], list[dict[str, Any]]]


def agent_card(
    agent: Agent,
    url: str,
    *,
    authenticated: bool,
    push: bool = False,
    grpc: str | None = None,
    agent_id: str | None = None,
    signer: CardSigner | None = None,
) -> dict[str, Any]:
    """``grpc``: the gRPC binding's ``host:port`` (None: not served); ``agent_id``: the
    agent's, when the card is not the default agent's; ``signer``: signs the card (its
    ``signatures``; None: unsigned)."""
    card = _card_v1(agent, url, authenticated=authenticated, push=push, grpc=grpc,
                    agent_id=agent_id)  # fmt: skip
    if signer is not None:
        card["signatures"] = signer(card)
    rest = url + REST_SUFFIX
    # The 0.3 fields beside the 1.0 ones (a 1.0 reader ignores them, as the proto does).
    card |= {
        "protocolVersion": "0.3.0",
        "url": url,
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [
            {"url": url, "transport": "JSONRPC"},
            {"url": rest, "transport": "HTTP+JSON"},
        ],
        "supportsAuthenticatedExtendedCard": False,
    }
    card["capabilities"]["stateTransitionHistory"] = False
    if authenticated:
        card["security"] = [{"bearer": []}, {"apiKey": []}]
        for name, scheme in card["securitySchemes"].items():
            scheme |= _SCHEMES_V03[name]
    return card


def _card_v1(
    agent: Agent,
    url: str,
    *,
    authenticated: bool,
    push: bool,
    grpc: str | None,
    agent_id: str | None,
) -> dict[str, Any]:
    """The card as an A2A 1.0 ``AgentCard`` in proto JSON: only fields of the proto."""
    rest = url + REST_SUFFIX
    card: dict[str, Any] = {
        "name": agent.name,
        "description": agent.description,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": rest, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": rest, "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
        ],
        "version": agent.version,
        "provider": {"organization": f"gateway {__version__}", "url": url},
        # Push notifications (gateway/push): offered when the app serves their configs.
        "capabilities": {"streaming": True, "pushNotifications": push},
        "defaultInputModes": list(agent.input_modes),
        "defaultOutputModes": list(agent.output_modes),
        "skills": [s.to_json() for s in agent.skills],
    }
    if grpc is not None:
        interface = {"url": grpc, "protocolBinding": "GRPC", "protocolVersion": "1.0"}
        if agent_id is not None:
            interface["tenant"] = GRPC_AGENT_TENANT.format(agent_id=agent_id)
        card["supportedInterfaces"].insert(2, interface)
    if authenticated:
        card["securitySchemes"] = copy.deepcopy(_SCHEMES_V1)
        card["securityRequirements"] = copy.deepcopy(_SECURITY_REQUIREMENTS)
    return card
