"""Waiting for a task to settle: on its events, with a bounded fallback poll."""

from __future__ import annotations

import time

from gateway.engine.events import INTERRUPTED, NEXT, Mailbox, TaskEvent
from gateway.engine.status import settled
from gateway.principal import Principal
from gateway.store.redis_store import Store

__all__ = ["wait_until_settled"]

# A lost notification (a dropped subscription) delays a blocking request by at most this.
FALLBACK_POLL_SECONDS = 2.0


async def wait_until_settled(
    store: Store,
    principal: Principal,
    context_id: str,
    task_id: str,
    events: Mailbox,
    cap_seconds: float,
    seq: int = 0,
) -> TaskEvent | None:
    """Wait until the run of the message at ``seq`` has settled (the task is terminal or
    interrupted, or went on with a later message), the task is gone, or ``cap_seconds`` have
    passed. Events of runs of earlier messages are not news.

    Returns the settling event when one arrived (None otherwise)."""
    deadline = time.monotonic() + cap_seconds
    while (remaining := deadline - time.monotonic()) > 0:
        event = await events.next(min(remaining, FALLBACK_POLL_SECONDS))
        if event is None:
            if await store.run_settled(principal, context_id, task_id, seq):
                return None
            continue
        ends_run = settled(event.state) or event.state in (NEXT, INTERRUPTED)
        if ends_run and (event.seq == 0 or event.seq >= seq):
            return event
    return None
