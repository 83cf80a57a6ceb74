"""What the remote specialist agent double does with a message, written once for both
a2a-sdk lines: the 0.3 double (``tests/a2a_remote_server.py``) and the 1.x one
(``a2a_1x_remote.py``, run in the 1.x environment beside this file). It imports nothing
but the standard library; each double hands it the few pieces of its SDK (``Sdk``).

By the user's text: ``ask`` → input-required with a question; ``slow`` → works for a
moment, then completes; ``hang`` → works until canceled; ``late`` → records the message,
answers a second later with a task that works until canceled (a send still in flight when
the message is seen); ``fail`` → fails with a reason; ``chunks`` → the artifact in three
chunks (``append``, ``lastChunk``), a moment apart, then completes; anything else
completes at once with an artifact. Every message is recorded in ``seen`` (text, context
id, task id), every canceled task id in ``canceled``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sdk:
    """The pieces of an a2a-sdk line the specialist uses."""

    new_task: Callable[[Any], Any]  # the task for a user message
    text_part: Callable[[str], Any]
    updater: Callable[[Any, str, str], Any]  # TaskUpdater(event queue, task id, context id)
    # keyword arguments of ``TaskUpdater.requires_input`` (0.3 marks the event final)
    requires_input: dict[str, Any] = field(default_factory=dict)


async def execute(sdk: Sdk, context: Any, event_queue: Any, seen: list[dict[str, Any]]) -> None:
    text = context.get_user_input()
    task = context.current_task
    if text.startswith("late") and task is None:
        assert context.message is not None
        seen.append({"text": text, "contextId": context.context_id, "taskId": None})
        await asyncio.sleep(1.0)
        task = sdk.new_task(context.message)
        await event_queue.enqueue_event(task)
        seen[-1]["taskId"] = task.id
        await sdk.updater(event_queue, task.id, task.context_id).start_work()
        await asyncio.sleep(30)
        return
    if task is None:
        assert context.message is not None
        task = sdk.new_task(context.message)
        await event_queue.enqueue_event(task)
    seen.append({"text": text, "contextId": task.context_id, "taskId": task.id})
    updater = sdk.updater(event_queue, task.id, task.context_id)

    def say(words: str) -> Any:
        return updater.new_agent_message([sdk.text_part(words)])

    if text.startswith("ask"):
        await updater.requires_input(say("Which ward is the patient on?"), **sdk.requires_input)
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
            await updater.add_artifact([sdk.text_part(piece)], artifact_id="op-1",
                                       name="opinion", append=n > 0,
                                       last_chunk=n == len(pieces) - 1)  # fmt: skip
        await updater.complete(say("Opinion attached."))
    else:
        if text.startswith("slow"):
            await updater.start_work()
            await asyncio.sleep(0.6)
        answer = f"specialist opinion on: {text}"
        await updater.add_artifact([sdk.text_part(answer)], name="opinion")
        await updater.complete(say("Opinion attached."))


async def cancel(sdk: Sdk, context: Any, event_queue: Any, canceled: list[str]) -> None:
    assert context.task_id is not None and context.context_id is not None
    canceled.append(context.task_id)
    await sdk.updater(event_queue, context.task_id, context.context_id).cancel()
