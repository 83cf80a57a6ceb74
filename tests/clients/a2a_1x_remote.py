"""A real remote A2A 1.0 agent for tests, built with the official a2a-sdk 1.x and served on
127.0.0.1 over one binding only (``JSONRPC`` or ``HTTP+JSON``): its card has 1.0
``supportedInterfaces`` and none of the 0.3 fields.

Run in the a2a-sdk 1.x environment: ``python a2a_1x_remote.py PORT BINDING [streaming]``.
It behaves as ``tests/a2a_remote_server.py``, by the same ``specialist.py`` (which imports
no project module: this environment has none), and reports what it received at
``GET /_seen`` (``{"seen": [...], "canceled": [...]}``); ``streaming`` makes its card offer
streaming.
"""

from __future__ import annotations

import sys
from typing import Any

import specialist  # beside this script, whose folder is first on the path
import uvicorn
from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

SEEN: list[dict[str, Any]] = []
CANCELED: list[str] = []

SDK = specialist.Sdk(
    new_task=new_task_from_user_message,
    text_part=lambda text: Part(text=text),
    updater=TaskUpdater,
)


class Specialist(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await specialist.execute(SDK, context, event_queue, SEEN)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await specialist.cancel(SDK, context, event_queue, CANCELED)


async def seen(request: Request) -> JSONResponse:
    return JSONResponse({"seen": SEEN, "canceled": CANCELED})


def app(port: int, binding: str, streaming: bool = False) -> Starlette:
    url = f"http://127.0.0.1:{port}/a2a"
    card = AgentCard(
        name="Cardiology specialist",
        description="A remote specialist agent (A2A 1.0).",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=binding, protocol_version="1.0")
        ],
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="opinion", name="Opinion", description="Gives one.", tags=["x"])],
    )
    handler = DefaultRequestHandler(Specialist(), InMemoryTaskStore(), card)
    if binding == "JSONRPC":
        routes = create_jsonrpc_routes(handler, "/a2a")
    else:
        routes = create_rest_routes(handler, path_prefix="/a2a")
    return Starlette(routes=[*create_agent_card_routes(card), *routes, Route("/_seen", seen)])


if __name__ == "__main__":
    port, binding = int(sys.argv[1]), sys.argv[2]
    streaming = sys.argv[3:] == ["streaming"]
    uvicorn.run(app(port, binding, streaming), host="127.0.0.1", port=port, log_level="warning")
