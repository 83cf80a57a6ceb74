"""Which encryption keys sealed this Redis's data, and which keys the live processes know.

``KEYRING`` (hash): key id -> fingerprint (``keyring.fingerprint``, an HMAC keyed by the key:
never the key, no help to guess it) of each key that seals data here. A process that seals
writes adds its current key there as it starts (``HSETNX``: the first process to name an id
names its key), then compares: a process whose key of a listed id is another key, or which
lacks a listed id, refuses to start (``ForeignKeyError``), so one wrongly configured replica
cannot seal writes that the others cannot open. ``gateway encryption rotate-data`` adds its
target key, and once a whole pass has left nothing unreadable it removes the ids no data is
sealed with any more (``retire``).

``REPLICAS`` (hash): process name -> JSON ``{"keys": {id: fingerprint}, "current": id,
"until": ms}``, rewritten every ``HEARTBEAT_SECONDS`` and removed when the process stops; an
entry past its ``until`` (a process that died) is ignored and dropped. ``rotate-data`` reads
it to refuse to re-seal with a key that a live process does not have.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.options.keyring import KeyringError
from gateway.store.assembly import text_of
from gateway.store.keys import KEYRING, REPLICAS
from gateway.store.sealing import Sealer

__all__ = [
    "HEARTBEAT_SECONDS",
    "ForeignKeyError",
    "KeyProblems",
    "KeyRegistry",
    "Replica",
    "key_problems",
]

log = logging.getLogger("gateway.keys")

HEARTBEAT_SECONDS = 10.0
# A process's entry counts as live this long after its last heartbeat.
_LIVE_SECONDS = 3 * HEARTBEAT_SECONDS


class ForeignKeyError(KeyringError):
    """GATEWAY_ENCRYPTION_KEYS does not open what this Redis holds (names ids, never keys)."""


@dataclass(frozen=True)
class KeyProblems:
    """How a keyring disagrees with the keys that sealed the store's data."""

    foreign: tuple[str, ...] = ()  # ids whose key here is another key than the store's
    missing: tuple[str, ...] = ()  # ids the store's data is sealed with, absent here

    def __bool__(self) -> bool:
        return bool(self.foreign or self.missing)

    def message(self) -> str:
        parts = []
        if self.foreign:
            parts.append(
                f"key id {', '.join(self.foreign)} of GATEWAY_ENCRYPTION_KEYS is another key "
                "than the one this Redis's data is sealed with (a new key needs a new id)"
            )
        if self.missing:
            parts.append(
                f"this Redis holds data sealed with key id {', '.join(self.missing)}, which "
                "GATEWAY_ENCRYPTION_KEYS lacks (keep it after the current key until "
                "`gateway encryption rotate-data` has re-sealed its data)"
            )
        return "; ".join(parts)


def key_problems(stored: Mapping[str, str], mine: Mapping[str, str]) -> KeyProblems:
    """``stored``: the registry (id -> fingerprint); ``mine``: a keyring's fingerprints."""
    foreign = tuple(sorted(k for k, fp in stored.items() if k in mine and mine[k] != fp))
    missing = tuple(sorted(k for k in stored if k not in mine))
    return KeyProblems(foreign, missing)


@dataclass(frozen=True)
class Replica:
    """A live process, as its last heartbeat described it."""

    name: str
    keys: Mapping[str, str]  # id -> fingerprint
    current: str  # the key it seals writes with ("": it writes in clear)
    until_ms: int

    def has(self, key_id: str, key_fingerprint: str) -> bool:
        return self.keys.get(key_id) == key_fingerprint


def _now_ms() -> int:
    return int(time.time() * 1000)


def _texts(raw: Mapping[Any, Any]) -> dict[str, str]:
    return {text_of(k): text_of(v) for k, v in raw.items()}


class KeyRegistry:
    """The registry of one Redis, seen by a process with ``sealer``'s keyring."""

    def __init__(self, client: Any, sealer: Sealer, name: str = "") -> None:
        self.client = client
        self.sealer = sealer
        self.name = name
        keyring = sealer.keyring
        self.fingerprints = keyring.fingerprints() if keyring is not None else {}
        self.current = (sealer.current or "") if sealer.seal_writes else ""
        self._beat: asyncio.Task[None] | None = None
        self._warned: KeyProblems = KeyProblems()

    async def stored(self) -> dict[str, str]:
        return _texts(await self.client.hgetall(KEYRING))

    async def register(self, key_id: str) -> None:
        """Name ``key_id``'s key as the one data is sealed with (unless an id is named)."""
        if key_id:
            await self.client.hsetnx(KEYRING, key_id, self.fingerprints[key_id])

    async def check(self) -> KeyProblems:
        return key_problems(await self.stored(), self.fingerprints)

    async def verify(self) -> None:
        """Register the current key, then ``ForeignKeyError`` unless every id the store's
        data is sealed with is here with its key."""
        await self.register(self.current)
        problems = await self.check()
        if problems:
            raise ForeignKeyError(problems.message())

    # -- live processes -------------------------------------------------------------------

    async def join(self) -> None:
        """``verify``, then keep this process's entry among the live ones until ``leave``."""
        await self.verify()
        await self._heartbeat()
        self._beat = asyncio.create_task(self._beating(), name="key-registry-heartbeat")

    async def leave(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat
            self._beat = None
        with contextlib.suppress(Exception):
            await self.client.hdel(REPLICAS, self.name)

    async def _heartbeat(self) -> None:
        entry = {
            "keys": self.fingerprints,
            "current": self.current,
            "until": _now_ms() + int(_LIVE_SECONDS * 1000),
        }
        await self.client.hset(REPLICAS, self.name, orjson.dumps(entry))

    async def _beating(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await self._heartbeat()
                problems = await self.check()
            except Exception as error:  # Redis away for a while: the next beat tries again
                log.warning("key registry heartbeat failed: %s", type(error).__name__)
                continue
            if problems and problems != self._warned:
                log.warning(
                    "stored data is sealed with keys this process cannot use: " + problems.message()
                )
            self._warned = problems

    async def live(self) -> list[Replica]:
        """The live processes (entries past their time are dropped)."""
        now, out, dead = _now_ms(), [], []
        for name, raw in _texts(await self.client.hgetall(REPLICAS)).items():
            try:
                entry = orjson.loads(raw)
                until = int(entry.get("until", 0))
                keys = {str(k): str(v) for k, v in dict(entry.get("keys", {})).items()}
            except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
                until = 0  # not an entry this code wrote: dropped
            if until < now:
                dead.append(name)
                continue
            out.append(Replica(name, keys, str(entry.get("current", "")), until))
        if dead:
            await self.client.hdel(REPLICAS, *dead)
        return out

    async def lacking(self, key_id: str) -> list[Replica]:
        """The live processes that do not have this keyring's key ``key_id``."""
        wanted = self.fingerprints[key_id]
        return [r for r in await self.live() if not r.has(key_id, wanted)]

    async def retire(self, keep: Iterable[str]) -> list[str]:
        """Remove the ids no data is sealed with any more, but those in ``keep`` and those
        a live process seals writes with; returns the ids removed."""
        kept = set(keep) | {r.current for r in await self.live()}
        gone = sorted(k for k in await self.stored() if k not in kept)
        if gone:
            await self.client.hdel(KEYRING, *gone)
            log.info("encryption keys retired", extra={"key_ids": gone})
        return gone
