"""How many streams this process holds open, per principal and in all.

A new stream over either limit is refused before anything is done for it (a streaming send
stores nothing): ``StreamsLimitedError`` (429) over its principal's, ``StreamsUnavailableError``
(503) over the process's, each with ``Retry-After``. Open streams are never ended to make
room. A slot is held from admission until the stream is closed (or collected unread).
"""

from __future__ import annotations

from gateway.errors import StreamsLimitedError, StreamsUnavailableError
from gateway.principal import Principal

__all__ = ["Slot", "StreamLimits"]


class Slot:
    """One admitted stream; ``release`` (idempotent) gives its place back."""

    def __init__(self, limits: StreamLimits, who: tuple[str, str]) -> None:
        self._limits, self._who = limits, who
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._limits._left(self._who)


class StreamLimits:
    def __init__(self, per_principal: int, per_process: int) -> None:
        self.per_principal, self.per_process = per_principal, per_process
        self._open: dict[tuple[str, str], int] = {}
        self.total = 0

    def admit(self, principal: Principal) -> Slot:
        who = (principal.tenant, principal.user)
        held = self._open.get(who, 0)
        if held >= self.per_principal:
            raise StreamsLimitedError()
        if self.total >= self.per_process:
            raise StreamsUnavailableError()
        self._open[who] = held + 1
        self.total += 1
        return Slot(self, who)

    def held(self, principal: Principal) -> int:
        return self._open.get((principal.tenant, principal.user), 0)

    def _left(self, who: tuple[str, str]) -> None:
        self.total -= 1
        held = self._open.get(who, 0) - 1
        if held > 0:
            self._open[who] = held
        else:
            self._open.pop(who, None)
