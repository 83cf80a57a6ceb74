"""Agent cards validate against the A2A v0.3.0 schema and say the truth."""

from __future__ import annotations

import httpx
import pytest

from tests.a2a_schema import assert_a2a
from tests.conftest import Send, auth


@pytest.mark.parametrize(
    ("path", "url"),
    [
        ("/.well-known/agent-card.json", "http://gw"),
        ("/agent-card.json", "http://gw"),
        ("/agents/echo/.well-known/agent-card.json", "http://gw/agents/echo"),
        ("/agents/echo/agent-card.json", "http://gw/agents/echo"),
    ],
)
async def test_cards_are_valid_and_authenticated(
    keyed: httpx.AsyncClient, path: str, url: str
) -> None:
    r = await keyed.get(path)
    assert r.status_code == 200
    card = r.json()
    assert_a2a("AgentCard", card)
    assert card["url"] == url
    assert card["protocolVersion"] == "0.3.0"
    # JSON-RPC at the base, proto-JSON REST at {base}/a2a, for 0.3 and 1.0 clients alike.
    assert card["preferredTransport"] == "JSONRPC"
    assert card["additionalInterfaces"] == [
        {"url": url, "transport": "JSONRPC"},
        {"url": f"{url}/a2a", "transport": "HTTP+JSON"},
    ]
    assert {
        (i["url"], i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]
    } == {
        (u, b, v)
        for u, b in ((url, "JSONRPC"), (f"{url}/a2a", "HTTP+JSON"))
        for v in ("0.3", "1.0")
    }
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": True,
        "stateTransitionHistory": False,
    }
    assert set(card["securitySchemes"]) == {"bearer", "apiKey"}
    assert card["securitySchemes"]["bearer"]["scheme"] == "bearer"


async def test_unknown_agent_card_is_404(client: httpx.AsyncClient) -> None:
    r = await client.get("/agents/nobody/.well-known/agent-card.json")
    assert r.status_code == 404 and r.json()["error"] == "AgentNotFoundError"


async def test_public_url_setting_names_the_card_url(make_app: object) -> None:
    async with make_app(public_url="https://gw.hospital.example") as c:  # type: ignore[operator]
        card = (await c.get("/agents/echo/agent-card.json")).json()
    assert card["url"] == "https://gw.hospital.example/agents/echo"


async def test_tasks_and_messages_validate_against_a2a(
    keyed: httpx.AsyncClient, send: Send
) -> None:
    data = {"kind": "data", "data": {"x": [1, 2]}}
    file = {"kind": "file", "file": {"uri": "https://f.example/a.txt", "mimeType": "text/plain"}}
    task = (await send("t", data, file, via=keyed, headers=auth("alice"))).json()["task"]
    full = (await keyed.get(f"/v1/tasks/{task['id']}", headers=auth("alice"))).json()
    assert_a2a("Task", task)
    assert_a2a("Task", full)
    for m in full["history"]:
        assert_a2a("Message", m)
    canceled = (
        await send(
            "w",
            via=keyed,
            headers=auth("alice"),
            metadata={"echo": {"finalState": "working"}},
            configuration={"blocking": False},
        )
    ).json()["task"]
    r = await keyed.post(f"/v1/tasks/{canceled['id']}:cancel", headers=auth("alice"))
    assert_a2a("Task", r.json())
