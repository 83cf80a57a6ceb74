"""AgentCards generated from the agents and the auth mode: one card for A2A 0.3 and 1.0.

Both versions' clients read the same document. 0.3 clients take ``url`` with
``preferredTransport`` and ``additionalInterfaces``; 1.0 clients take ``supportedInterfaces``
(the 1.0 SDK maps the 0.3 ``securitySchemes`` and ``security`` itself). Every binding is
named at one URL for both versions, so a client that lets a 0.3 URL win lands on the same
endpoint: JSON-RPC at the agent base (the method name tells the version) and the
proto-JSON REST binding at ``{base}/a2a`` (0.3 under ``/v1/...``, 1.0 without). The
Corti-style REST at ``{base}/v1/...`` is documented, not advertised: its JSON is the
canonical 0.3 spelling, which the SDKs' REST clients do not parse. With the gRPC binding
on (``GATEWAY_GRPC_PORT``), a 1.0 ``GRPC`` interface names its ``host:port`` and, for an
agent other than the default one, the ``tenant`` that routes to it (``agents/{id}``).
"""

from __future__ import annotations

from typing import Any

from gateway import __version__
from gateway.agents.base import Agent

__all__ = ["GRPC_AGENT_TENANT", "REST_SUFFIX", "agent_card"]

# Where an agent's proto-JSON REST binding lives, relative to its base URL.
REST_SUFFIX = "/a2a"
# The gRPC ``tenant`` field that routes a call to an agent (gateway/grpcapi/edge.py).
GRPC_AGENT_TENANT = "agents/{agent_id}"

_SECURITY_SCHEMES = {
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


def agent_card(
    agent: Agent,
    url: str,
    *,
    authenticated: bool,
    push: bool = False,
    grpc: str | None = None,
    agent_id: str | None = None,
) -> dict[str, Any]:
    """``grpc``: the gRPC binding's ``host:port`` (None: not served); ``agent_id``: the
    agent's, when the card is not the default agent's."""
    rest = url + REST_SUFFIX
    card: dict[str, Any] = {
        "protocolVersion": "0.3.0",
        "name": agent.name,
        "description": agent.description,
        "url": url,
        "preferredTransport": "JSONRPC",
        "additionalInterfaces": [
            {"url": url, "transport": "JSONRPC"},
            {"url": rest, "transport": "HTTP+JSON"},
        ],
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": rest, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": rest, "protocolBinding": "HTTP+JSON", "protocolVersion": "0.3"},
        ],
        "version": agent.version,
        "provider": {"organization": f"gateway {__version__}", "url": url},
        "capabilities": {
            "streaming": True,
            "pushNotifications": False,
            "stateTransitionHistory": False,
        },
        "defaultInputModes": list(agent.input_modes),
        "defaultOutputModes": list(agent.output_modes),
        "skills": [s.to_json() for s in agent.skills],
        "supportsAuthenticatedExtendedCard": False,
    }
    if grpc is not None:
        interface = {"url": grpc, "protocolBinding": "GRPC", "protocolVersion": "1.0"}
        if agent_id is not None:
            interface["tenant"] = GRPC_AGENT_TENANT.format(agent_id=agent_id)
        card["supportedInterfaces"].insert(2, interface)
    # Push notifications (gateway/push): offered when the app serves their configs.
    card["capabilities"]["pushNotifications"] = push
    if authenticated:
        card["securitySchemes"] = _SECURITY_SCHEMES
        card["security"] = [{"bearer": []}, {"apiKey": []}]
    return card
