"""The history a run's agent sees (``AgentRequest.history``), read from the store only when
the agent asks for it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.principal import Principal
from gateway.store.redis_store import Store

__all__ = ["StoredHistory"]


@dataclass(frozen=True)
class StoredHistory:
    """The last ``window`` messages of the context a run sees, read on demand: those up to
    ``last`` bar the run's own (``seq``) and the later ones still waiting for the task."""

    store: Store
    principal: Principal
    context_id: str
    seq: int
    window: int
    last: int = 0
    waiting: frozenset[int] = frozenset()

    @property
    def _end(self) -> int:
        return max(self.last, self.seq - 1)

    @property
    def count(self) -> int:
        skipped = (1 if self.seq <= self._end else 0) + len(self.waiting)
        return max(0, min(self.window, self._end - skipped))

    def _seqs(self) -> list[int]:
        wanted: list[int] = []
        at = self._end
        while len(wanted) < self.count and at > 0:
            if at != self.seq and at not in self.waiting:
                wanted.append(at)
            at -= 1
        return wanted[::-1]

    async def load(self) -> Sequence[Mapping[str, Any]]:
        found = await self.store.context_messages(self.principal, self.context_id, self._seqs())
        return [m.value for m in found]  # the agent contract's JSON
