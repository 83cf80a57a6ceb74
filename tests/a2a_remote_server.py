"""A real remote A2A agent for tests, built with the official ``a2a-sdk`` (0.3.x, protocol
0.3.0), served on 127.0.0.1 over JSON-RPC or HTTP+JSON (the card names which).

What it does depends on the user's text: ``ask`` → input-required with a question;
``slow`` → works for a moment, then completes; ``hang`` → works until canceled;
``late`` → records the message, answers a second later with a task that works until
canceled (a send still in flight when the message is seen); ``fail`` → fails with a
reason; ``chunks`` → the artifact in three chunks (``append``, ``lastChunk``), a moment
apart, then completes; anything else completes at once with an artifact. ``streaming``
makes its card offer streaming (the SDK then streams those events).
Every message it receives is recorded in ``seen`` (text, context id, task id).
"""

from __future__ import annotations

import asyncio
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

from tests.http_double import ServedDouble


class _Specialist(AgentExecutor):
    def __init__(self, seen: list[dict[str, Any]], canceled: list[str]) -> None:
        self.seen, self.canceled = seen, canceled

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        task = context.current_task
        if text.startswith("late") and task is None:
            assert context.message is not None
            self.seen.append({"text": text, "contextId": context.context_id, "taskId": None})
            await asyncio.sleep(1.0)
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
            self.seen[-1]["taskId"] = task.id
            await TaskUpdater(event_queue, task.id, task.context_id).start_work()
            await asyncio.sleep(30)
            return
        if task is None:
            assert context.message is not None
            task = new_task(context.message)
            await event_queue.enqueue_event(task)
        self.seen.append({"text": text, "contextId": task.context_id, "taskId": task.id})
        updater = TaskUpdater(event_queue, task.id, task.context_id)

        def say(words: str) -> Any:
            return updater.new_agent_message([Part(root=TextPart(text=words))])

        if text.startswith("ask"):
            await updater.requires_input(say("Which ward is the patient on?"), final=True)
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
                await updater.add_artifact([Part(root=TextPart(text=piece))], artifact_id="op-1",
                                           name="opinion", append=n > 0,
                                           last_chunk=n == len(pieces) - 1)  # fmt: skip
            await updater.complete(say("Opinion attached."))
        else:
            if text.startswith("slow"):
                await updater.start_work()
                await asyncio.sleep(0.6)
            answer = f"specialist opinion on: {text}"
            await updater.add_artifact([Part(root=TextPart(text=answer))], name="opinion")
            await updater.complete(say("Opinion attached."))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        self.canceled.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class RemoteAgentServer(ServedDouble):
    def __init__(self, transport: str = "JSONRPC", streaming: bool = False) -> None:
        super().__init__()
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
