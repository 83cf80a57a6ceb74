"""The reference: the a2a-sdk 0.3 JSON-RPC server (its Starlette app), in-memory task store,
and an echo executor that answers every message with a completed task holding the message's
parts as an artifact and a reply, as the gateway's echo agent does.

It persists nothing: what the official SDK's own server costs per blocking send.
"""

from __future__ import annotations

import os

import uvicorn
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.apps import A2AStarletteApplication
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentSkill, Message, Role
from a2a.utils import new_task


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        task = context.current_task or new_task(context.message)
        await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        parts = context.message.parts
        await updater.add_artifact(parts, name="echo")
        reply = Message(
            role=Role.agent,
            message_id=f"{task.id}-reply",
            parts=parts,
            context_id=task.context_id,
            task_id=task.id,
        )
        await updater.complete(reply)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def card(port: int) -> AgentCard:
    return AgentCard(
        name="Echo",
        description="Echoes what it receives.",
        url=f"http://127.0.0.1:{port}/",
        version="1.0.0",
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain", "application/json"],
        capabilities=AgentCapabilities(streaming=False),
        skills=[AgentSkill(id="echo", name="Echo", description="Echo", tags=["echo"])],
    )


def app(port: int) -> object:
    handler = DefaultRequestHandler(agent_executor=Echo(), task_store=InMemoryTaskStore())
    return A2AStarletteApplication(agent_card=card(port), http_handler=handler).build()


if __name__ == "__main__":
    port = int(os.environ["PORT"])
    uvicorn.run(app(port), host="127.0.0.1", port=port, log_level="warning")  # type: ignore[arg-type]
