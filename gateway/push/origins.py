"""A cap on webhook requests in flight per origin (scheme, host, port).

The deliverer's request slots are shared by every webhook; without a cap, one webhook that
answers slowly (or holds requests open until the timeout) with a backlog of events would
take every slot and the others' events would wait behind it. ``OriginLimiter.hold`` lets at
most ``per_origin`` requests to one origin be under way; the others wait for the origin,
not for a slot. A gate lives only while someone holds or waits for it, so the map stays as
small as the set of origins being delivered to.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

__all__ = ["OriginLimiter"]


@dataclass
class _Gate:
    slots: asyncio.Semaphore
    users: int = field(default=0)  # holding or waiting


class OriginLimiter:
    def __init__(self, per_origin: int) -> None:
        if per_origin < 1:
            raise ValueError("per_origin must be at least 1")
        self.per_origin = per_origin
        self._gates: dict[str, _Gate] = {}

    @asynccontextmanager
    async def hold(self, origin: str) -> AsyncIterator[None]:
        """A place for one request to ``origin``, for the block."""
        gate = self._gates.get(origin)
        if gate is None:
            gate = self._gates[origin] = _Gate(asyncio.Semaphore(self.per_origin))
        gate.users += 1
        try:
            async with gate.slots:
                yield
        finally:
            gate.users -= 1
            if gate.users == 0:
                del self._gates[origin]
