"""One wrapper of ``send`` for the middlewares that read or extend a response's start.

A middleware that wraps ``send`` adds a coroutine call to every ASGI message of every
response (a blocking send's answer is two: its start and its body), ~6 µs each on a busy
process. So the middlewares that only read the status or add headers register a plain
function here instead, and the outermost one (``AccessLogMiddleware``) wraps ``send`` once
(``started``): on ``http.response.start`` it records the status and runs those functions,
the innermost middleware's first, as nested wrappers would have seen the message.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Message, Scope

__all__ = ["on_start", "started", "status_of"]

_HOOKS = "response_start_hooks"
_STATUS = "response_status"


def on_start(scope: Scope, hook: Callable[[Message], None]) -> None:
    """Have ``hook`` see (and may extend the headers of) the request's response start."""
    scope.setdefault("state", {}).setdefault(_HOOKS, []).append(hook)


def started(scope: Scope, message: Message) -> None:
    """The response starts with ``message`` (``http.response.start``): its status is kept
    for ``status_of`` and the registered hooks run, the last registered (innermost) first."""
    state = scope.setdefault("state", {})
    state[_STATUS] = message["status"]
    for hook in reversed(state.get(_HOOKS, ())):
        hook(message)


def status_of(scope: Scope, default: int = 500) -> int:
    """The status the response started with; ``default`` when none has started (the app
    raised before answering: Starlette's outermost layer answers 500)."""
    status: int = scope.get("state", {}).get(_STATUS, default)
    return status
