"""A real remote A2A agent for tests, built with the official ``a2a-sdk`` (0.3.x, protocol
0.3.0), served on 127.0.0.1 over JSON-RPC or HTTP+JSON (the card names which).

What it does depends on the user's text (``ask``, ``slow``, ``hang``, ``late``, ``fail``,
``chunks``, else an opinion: see ``tests/clients/specialist.py``, which the 1.0 double
shares). ``streaming`` makes its card offer streaming (the SDK then streams those events).
Every message it receives is recorded in ``seen`` (text, context id, task id).
"""

from __future__ import annotations

from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2ARESTFastAPIApplication, A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentSkill,
    Part,
    TextPart,
    TransportProtocol,
)
from a2a.utils import new_task

from tests.clients import specialist
from tests.http_double import ServedDouble

_SDK = specialist.Sdk(
    new_task=new_task,
    text_part=lambda text: Part(root=TextPart(text=text)),
    updater=TaskUpdater,
    requires_input={"final": True},
)


class _Specialist(AgentExecutor):
    def __init__(self, seen: list[dict[str, Any]], canceled: list[str]) -> None:
        self.seen, self.canceled = seen, canceled

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        await specialist.execute(_SDK, context, event_queue, self.seen)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await specialist.cancel(_SDK, context, event_queue, self.canceled)


class RemoteAgentServer(ServedDouble):
    def __init__(
        self, transport: str = "JSONRPC", streaming: bool = False, port: int | None = None
    ) -> None:
        super().__init__(port=port)
        self.seen: list[dict[str, Any]] = []
        self.canceled: list[str] = []
        card = AgentCard(
            name="Cardiology specialist",
            description="A remote specialist agent.",
            url=f"http://127.0.0.1:{self.port}/",
            version="1.0.0",
            protocol_version="0.3.0",
            preferred_transport=TransportProtocol(transport),
            capabilities=AgentCapabilities(streaming=streaming),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=[AgentSkill(id="opinion", name="Opinion", description="Gives one.", tags=[])],
        )
        handler = DefaultRequestHandler(_Specialist(self.seen, self.canceled), InMemoryTaskStore())
        if transport == "HTTP+JSON":
            app: Any = A2ARESTFastAPIApplication(agent_card=card, http_handler=handler).build()
        else:
            app = A2AStarletteApplication(agent_card=card, http_handler=handler).build()
        self.serve(app)

    @property
    def card_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/agent-card.json"
