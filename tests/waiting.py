"""Bounded waits for tests.

``until`` polls a condition until it holds and returns its value, or fails with an
AssertionError that says what was awaited, for how long, the last value seen and, where
processes are involved, the tail of their logs. ``stays`` is the opposite: a deliberate
window in which something must *not* happen, checked throughout. Neither sleeps for a
fixed time to synchronise: deadlines are generous because they only matter on failure.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, overload

T = TypeVar("T")
Check = Callable[[], T | Awaitable[T]]
Logs = Path | Iterable[Path]

# How long a condition inside one process may take (a run, a delivery, a retry).
WAIT_SECONDS = float(os.environ.get("GATEWAY_TEST_WAIT_SECONDS", "20"))
LOG_TAIL_CHARS = 3000


def log_tail(logs: Logs | None) -> str:
    """The end of each log (a directory stands for the ``*.log`` files in it), labelled."""
    if logs is None:
        return ""
    if isinstance(logs, Path):
        paths = sorted(logs.glob("*.log")) if logs.is_dir() else [logs]
    else:
        paths = list(logs)
    out = []
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            out.append(f"\n--- {path.name}: unreadable ({exc})")
            continue
        if not text:
            out.append(f"\n--- {path.name}: empty (the process has logged nothing yet)")
            continue
        cut = "…" if len(text) > LOG_TAIL_CHARS else ""
        out.append(
            f"\n--- {path.name} (last {LOG_TAIL_CHARS} chars) ---\n{cut}{text[-LOG_TAIL_CHARS:]}"
        )
    return "".join(out)


def _failure(what: str, seconds: float, last: Any, logs: Logs | None) -> AssertionError:
    shown = repr(last)
    if len(shown) > 500:
        shown = shown[:500] + "…"
    return AssertionError(
        f"timed out after {seconds:g}s waiting for {what} (last value: {shown}){log_tail(logs)}"
    )


@overload
async def until(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout: float = ...,  # noqa: ASYNC109
    what: str = ...,
    every: float = ...,
    logs: Logs | None = ...,
) -> T: ...


@overload
async def until(
    check: Callable[[], T | None],
    *,
    timeout: float = ...,  # noqa: ASYNC109
    what: str = ...,
    every: float = ...,
    logs: Logs | None = ...,
) -> T: ...


async def until(
    check: Check[Any],
    *,
    timeout: float = WAIT_SECONDS,  # noqa: ASYNC109 (the deadline is reported, not just hit)
    what: str = "the condition",
    every: float = 0.02,
    logs: Logs | None = None,
) -> Any:
    """Poll ``check`` (a function, plain or async) until it returns something truthy, and
    return that. The deadline is hard: a check still running at it is cancelled."""
    last: Any = None
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            while True:
                value = check()
                if inspect.isawaitable(value):
                    value = await value
                last = value
                if value:
                    return value
                await asyncio.sleep(every)
    except TimeoutError:
        if not deadline.expired():
            raise  # the check's own timeout, not ours
        raise _failure(what, timeout, last, logs) from None


def until_sync(
    check: Callable[[], T | None],
    *,
    timeout: float = WAIT_SECONDS,
    what: str = "the condition",
    every: float = 0.05,
    logs: Logs | None = None,
) -> T:
    """``until`` for code that is not async (process start-up, servers on threads)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, value, logs)
        time.sleep(every)


async def stays(
    check: Check[Any],
    seconds: float,
    *,
    what: str,
    every: float = 0.02,
    logs: Logs | None = None,
) -> None:
    """Assert that ``check`` holds throughout a window of ``seconds``: for what must *not*
    happen (a late write, a call that should never be made). The window is the point of
    the test, not synchronisation; it fails as soon as the check does."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if not value:
            raise AssertionError(f"{what}: no longer true (value: {value!r}){log_tail(logs)}")
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(every)
