"""A2A v0.3.0 AgentCards generated from the agents and the auth mode."""

from __future__ import annotations

from typing import Any

from gateway import __version__
from gateway.agents.base import Agent

__all__ = ["agent_card"]

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


def agent_card(agent: Agent, url: str, *, authenticated: bool) -> dict[str, Any]:
    card: dict[str, Any] = {
        "protocolVersion": "0.3.0",
        "name": agent.name,
        "description": agent.description,
        "url": url,
        "preferredTransport": "HTTP+JSON",
        "additionalInterfaces": [{"url": url, "transport": "HTTP+JSON"}],
        "version": agent.version,
        "provider": {"organization": f"gateway {__version__}", "url": url},
        "capabilities": {
            "streaming": False,
            "pushNotifications": False,
            "stateTransitionHistory": False,
        },
        "defaultInputModes": list(agent.input_modes),
        "defaultOutputModes": list(agent.output_modes),
        "skills": [s.to_json() for s in agent.skills],
        "supportsAuthenticatedExtendedCard": False,
    }
    if authenticated:
        card["securitySchemes"] = _SECURITY_SCHEMES
        card["security"] = [{"bearer": []}, {"apiKey": []}]
    return card
