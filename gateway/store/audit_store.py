"""The audit trail in Redis: one stream per tenant (``gw:{au:<tenant digest>}:audit``) and
one for attempts that never authenticated (``gw:{au:-}:audit``), each trimmed to a number
of entries and an age as it is written."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, Protocol

from gateway.clock import now_ms
from gateway.store.keys import audit_stream
from gateway.store.multiplex import Multiplexed
from gateway.store.translate import translated

__all__ = ["AuditStore", "audit_stream"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class StreamEntry(Protocol):
    """What the store writes of an audit entry (``gateway.audit.entry.AuditEntry``)."""

    @property
    def tenant(self) -> str | None: ...

    def fields(self) -> dict[str, str]: ...


class AuditStore:
    def __init__(
        self,
        client: Any,
        max_entries: int,
        max_age_seconds: float,
        hot: Multiplexed | None = None,
    ) -> None:
        self.client, self.hot = client, hot
        self.max_entries, self.max_age_ms = max_entries, int(max_age_seconds * 1000)

    @translated
    async def append(self, entries: Sequence[StreamEntry]) -> None:
        """Write a batch in one round trip (on the store's multiplexed connection, beside
        the sends of the moment, or one pipeline), trimming each stream touched."""
        oldest = f"{max(0, now_ms() - self.max_age_ms)}-0"
        if self.hot is not None:
            targets = [(audit_stream(e.tenant), e) for e in entries]
            commands: list[tuple[str | int, ...]] = [
                ("XADD", stream, "MAXLEN", "~", self.max_entries, "*",
                 *itertools.chain.from_iterable(e.fields().items()))
                for stream, e in targets
            ]  # fmt: skip
            streams = {stream for stream, _ in targets}
            commands += [("XTRIM", stream, "MINID", "~", oldest) for stream in streams]
            await self.hot.execute_many(commands)
            return
        streams = set()
        async with self.client.pipeline(transaction=False) as pipe:
            for entry in entries:
                stream = audit_stream(entry.tenant)
                streams.add(stream)
                pipe.xadd(stream, entry.fields(), maxlen=self.max_entries, approximate=True)
            for stream in streams:
                pipe.xtrim(stream, minid=oldest, approximate=True)
            await pipe.execute()

    @translated
    async def page(
        self, tenant: str | None, newest: str, oldest: str, count: int
    ) -> list[tuple[str, dict[Any, Any]]]:
        """Up to ``count`` entries from ``newest`` back to ``oldest`` (stream ids, ``(``
        for exclusive), newest first."""
        raw = await self.client.xrevrange(audit_stream(tenant), newest, oldest, count=count)
        return [(_text(entry_id), fields) for entry_id, fields in raw]
