"""Finding and deleting a Cortadel user id's memories without the gateway's ledger.

Cortadel's list API pages through every memory of one user id, superseded versions
included; its search can be confined to a session (a context). Erasure of a subject uses
the first (all that user id holds), a context's scrub the second (what Cortadel holds for
that session beyond the ledger). Both are bounded: at most ``MAX_PAGES`` pages per round.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_PAGES", "StoredMemory", "delete_ids", "erase_all", "listed", "sweep_session"]

MAX_PAGES = 100  # of 100 memories each, per listing
PAGE_SIZE = 100
DELETE_CHUNK = 500
ROUNDS = 5  # erasure lists again after deleting, until nothing is left (or this many times)
SWEEP_ROUNDS = 20  # a session sweep's searches (50 hits each)
SWEEP_QUERY = "session memories"  # any text: a vector search ranks every memory of the session

Retrying = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]


async def _once(call: Callable[[], Awaitable[Any]]) -> Any:
    return await call()


@dataclass(frozen=True)
class StoredMemory:
    id: str
    text: str
    created_s: int
    current: bool


async def listed(client: Any, retrying: Retrying = _once) -> list[StoredMemory]:
    """Every memory of the client's user id, superseded versions included (newest first,
    as Cortadel lists them)."""
    from cortadel import ListOptions

    found: dict[str, StoredMemory] = {}
    for page in range(1, MAX_PAGES + 1):
        options = ListOptions(page=page, size=PAGE_SIZE, include_superseded=True)
        result = await retrying(functools.partial(client.list, options))
        for item in result.items:
            if item.id and item.id not in found:
                current = item.is_current is not False and not item.invalid_at
                found[item.id] = StoredMemory(item.id, item.content or "", item.created_at, current)
        if not result.items or page >= (result.pages or 0):
            break
    return list(found.values())


async def delete_ids(client: Any, ids: list[str], retrying: Retrying = _once) -> int:
    for start in range(0, len(ids), DELETE_CHUNK):
        chunk = ids[start : start + DELETE_CHUNK]
        await retrying(functools.partial(client.delete, chunk))
    return len(ids)


async def erase_all(client: Any, retrying: Retrying = _once) -> int:
    """Delete every memory of the client's user id; how many were deleted."""
    gone: set[str] = set()
    for _ in range(ROUNDS):
        ids = [m.id for m in await listed(client, retrying) if m.id not in gone]
        if not ids:
            break
        await delete_ids(client, ids, retrying)
        gone.update(ids)
    return len(gone)


async def sweep_session(
    client: Any, session_id: str, skip: set[str], retrying: Retrying = _once
) -> list[str]:
    """Delete the memories Cortadel finds in a session beyond ``skip`` (returns their ids):
    vector searches confined to it, each one's new hits deleted before the next, until one
    finds none."""
    from cortadel import SearchOptions

    found: list[str] = []
    seen = set(skip)
    options = SearchOptions(top_k=50, mode="vector", session_id=session_id)
    for _ in range(SWEEP_ROUNDS):
        result = await retrying(functools.partial(client.search, SWEEP_QUERY, options))
        fresh = [h.id for h in result.results if h.id and h.id not in seen]
        if not fresh:
            break
        await delete_ids(client, fresh, retrying)
        seen.update(fresh)
        found.extend(fresh)
    return found
