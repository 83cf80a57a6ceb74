"""A real remote A2A 1.0 agent for tests, built with the official a2a-sdk 1.x and served on
127.0.0.1 over one binding only (``JSONRPC`` or ``HTTP+JSON``): its card has 1.0
``supportedInterfaces`` and none of the 0.3 fields.

Run in the a2a-sdk 1.x environment: ``python a2a_1x_remote.py PORT BINDING [streaming]``.
It behaves as ``tests/a2a_remote_server.py`` (``ask``, ``slow``, ``hang``, ``late``,
``fail``, ``chunks``, else an opinion; ``streaming`` makes its card offer streaming) and
reports what it received at ``GET /_seen`` (``{"seen": [...], "canceled": [...]}``).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

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


class Specialist(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task = context.current_task
        if text.startswith("late") and task is None:
            assert context.message is not None
            SEEN.append({"text": text, "contextId": context.context_id, "taskId": None})
            await asyncio.sleep(1.0)
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
            SEEN[-1]["taskId"] = task.id
            await TaskUpdater(event_queue, task.id, task.context_id).start_work()
            await asyncio.sleep(30)
            return
        if task is None:
            assert context.message is not None
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        SEEN.append({"text": text, "contextId": task.context_id, "taskId": task.id})
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        def say(words: str) -> Any:
            return updater.new_agent_message([Part(text=words)])

        if text.startswith("ask"):
            await updater.requires_input(say("Which ward is the patient on?"))
        elif text.startswith("fail"):
            await updater.failed(say("Specialist database unavailable."))
        elif text.startswith("hang"):
            await updater.start_work()
            await asyncio.sleep(30)
        elif text.startswith("chunks"):
            await updater.start_work()
            pieces = ["specialist ", "opinion on: ", text]
            for n, piece in enumerate(pieces):
                await asyncio.sleep(0.1)
                await updater.add_artifact([Part(text=piece)], artifact_id="op-1",
                                           name="opinion", append=n > 0,
                                           last_chunk=n == len(pieces) - 1)  # fmt: skip
            await updater.complete(say("Opinion attached."))
        else:
            if text.startswith("slow"):
                await updater.start_work()
                await asyncio.sleep(0.6)
            answer = f"specialist opinion on: {text}"
            await updater.add_artifact([Part(text=answer)], name="opinion")
            await updater.complete(say("Opinion attached."))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        CANCELED.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


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
