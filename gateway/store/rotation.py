"""`gateway encryption rotate-data`: re-seal stored content with the current key.

Walks the contexts' message and task hashes (``SCAN``, then ``HSCAN`` of each; push configs
are task fields, see ``push_records.py``, and so is a task's artifact being streamed,
``<tid>:pa``), the tasks' event logs, their memory vectors and the registered agents'
entries, and rewrites
every content value that is not already as a new write would be: sealed with the current
key (values of older keys, and clear values written while encryption was off), or, with
``GATEWAY_ENCRYPTION=off``, clear. Each value is replaced only if it is unchanged since it
was read (one script per batch compares and sets), so it runs next to a serving gateway:
a value written or scrubbed meanwhile is left alone (a new write is already current). TTLs
are kept (``HSET`` on an existing hash keeps its expiry).

Resumable: the ``SCAN`` cursor (one per primary on a Redis Cluster) and the counts are kept
in ``gw:{jobs}:rotation`` after each batch, so a rotation stopped half-way resumes where it
was (a changed current key starts over); values already current cost a header check, so even
starting over is quick.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio.cluster import RedisCluster

from gateway.errors import StoredDataUnreadableError
from gateway.store import fields as f
from gateway.store.agents_store import entry_aad
from gateway.store.assembly import text_of
from gateway.store.key_registry import ForeignKeyError, KeyRegistry
from gateway.store.keys import (
    AGENT_ENTRY,
    CONTEXT_CONTENT,
    ROTATION,
    TAGGED_KEYS,
    TASK_LOG,
    UserKeys,
)
from gateway.store.lua import Scripts
from gateway.store.lua.rotation import SwapFieldsArgs, SwapLogArgs, SwapStringArgs
from gateway.store.lua.vectors import RewriteVectorsArgs
from gateway.store.memory_store import VECTORS_FIELD, frame, frames_of
from gateway.store.push_records import is_current, open_config, seal_config
from gateway.store.sealing import (
    KeyringError,
    Sealer,
    context_of,
    key_id_of,
    split_artifacts,
)

__all__ = ["ReplicasLackKeyError", "Rotation", "RotationFigures", "rotate_data"]

log = logging.getLogger("gateway.rotation")

STATE = ROTATION
_TASK_CONTENT = (
    f.STATUS,
    f.METADATA,
    f.AGENT_METADATA,
    f.ARTIFACTS,
    f.OPEN_ARTIFACT,
)
_PUSH_CONFIG = re.compile(
    rf"^(.+){re.escape(f.PUSH_CONFIG)}[^:]+$"
)  # a task's push config (its URL, token sealed)
# The associated data field of an event log entry, by its kind (``event_log.py``).
_LOG_FIELD = {f.EVENT_STATUS.encode(): f.STATUS, f.EVENT_ARTIFACT.encode(): f.EVENTS_SEAL}
_EVENT_KIND, _EVENT_DATA = f.EVENT_KIND.encode(), f.EVENT_DATA.encode()


@dataclass
class RotationFigures:
    hashes: int = 0
    logs: int = 0  # tasks' event logs
    values: int = 0  # content values looked at
    resealed: int = 0  # rewritten
    skipped: int = 0  # changed or gone meanwhile: left alone
    unreadable: int = 0  # does not decrypt here: left as it is
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.resealed / self.seconds if self.seconds else 0.0


class Rotation:
    def __init__(self, client: Any, sealer: Sealer, *, batch: int = 500) -> None:
        self.client = client
        self.sealer = sealer
        self.batch = batch
        self._scripts = Scripts.register(client)
        self.target = sealer.current if sealer.seal_writes else ""

    def _stale(self, value: bytes) -> bool:
        """Whether ``value`` differs from what a write now would store: sealed with another
        key than the target (none: encryption off), or clear while there is a target."""
        if value in (b"", b"[]"):
            return False
        if value.startswith(b"["):  # an artifact list: sealed tokens, clear objects, or both
            return any(self._stale(item) for item in split_artifacts(value))
        if value.startswith(b"{"):
            return bool(self.target)
        return key_id_of(value) != (self.target or None)

    def _resealed(self, prefix: str, context_id: str, field: str, value: bytes) -> bytes:
        aad = context_of(prefix, context_id, field)
        if field.endswith(f.ARTIFACTS):
            items = split_artifacts(value)
            opened = [self.sealer.open(i, aad) for i in items]
            return b"[" + b",".join(self.sealer.seal_token(i, aad) for i in opened) + b"]"
        return self.sealer.reseal(value, aad)

    def _swaps(
        self,
        page: dict[Any, bytes],
        prefix: str,
        context_id: str,
        kind: str,
        figures: RotationFigures,
    ) -> list[Any]:
        """(field, value read, re-sealed value) of a page's content values not current."""
        swaps: list[Any] = []
        for raw_field, value in page.items():
            field = text_of(raw_field)
            push = _PUSH_CONFIG.match(field) if kind == "tasks" else None
            if push is not None:  # before the suffixes: a config id may end like one
                swap = self._push_swap(prefix, context_id, push.group(1), value, figures)
                swaps += [raw_field, value, swap] if swap is not None else []
                continue
            if kind == "msgs":
                aad_field = "msg"
            elif field.endswith(_TASK_CONTENT):
                aad_field = field
            else:
                continue
            figures.values += 1
            if not self._stale(value):
                continue
            try:
                new = self._resealed(prefix, context_id, aad_field, value)
            except StoredDataUnreadableError:
                figures.unreadable += 1  # moved, altered, or its key is gone: left
                continue
            swaps += [raw_field, value, new]
        return swaps

    def _push_swap(
        self, prefix: str, context_id: str, task_id: str, value: bytes, figures: RotationFigures
    ) -> bytes | None:
        """A push config re-sealed as a write now would store it (None: already so, or its
        sealed part does not open here)."""
        figures.values += 1
        try:
            if is_current(value, self.target or ""):
                return None
            clear = open_config(self.sealer, prefix, context_id, task_id, value)
        except (StoredDataUnreadableError, ValueError, KeyError, AttributeError):
            # its key is gone, or the value is not a config record: left as it is
            figures.unreadable += 1
            return None
        return seal_config(self.sealer, prefix, context_id, task_id, clear)

    async def _rotate_hash(self, key: str, figures: RotationFigures) -> None:
        match = CONTEXT_CONTENT.match(key)
        if match is None:
            if AGENT_ENTRY.match(key):
                await self._rotate_agent(key, figures)
            elif TASK_LOG.match(key):
                await self._rotate_log(key, figures)
            return
        prefix, context_id, kind = match.groups()
        if kind == "vec":
            await self._rotate_vectors(key, prefix, context_id, figures)
            return
        figures.hashes += 1
        cursor = 0
        while True:
            cursor, page = await self.client.hscan(key, cursor, count=self.batch)
            swaps = self._swaps(page, prefix, context_id, kind, figures)
            if swaps:
                args = SwapFieldsArgs(swaps).argv()
                done = int(await self._scripts.swap_fields(keys=[key], args=args))
                figures.resealed += done
                figures.skipped += len(swaps) // 3 - done
            if int(cursor) == 0:
                return

    async def _rotate_vectors(
        self, key: str, prefix: str, context_id: str, figures: RotationFigures
    ) -> None:
        """A context's memory vectors, as a new write would store them: sealed frames merged
        into one frame under the current key, vectors kept in clear (indexed before
        encryption was on) sealed as one frame, or, with encryption off, opened into clear
        rows; unless vectors were added or rewritten meanwhile (then the next run does it)."""
        meta = UserKeys(prefix).meta(context_id)
        form, generation = await self.client.hmget(
            meta, [f.META_VECTOR_FORM, f.META_VECTOR_GENERATION]
        )
        stored = await self.client.get(key)
        if not stored:
            return
        figures.values += 1
        aad = context_of(prefix, context_id, VECTORS_FIELD)
        if form == b"s":
            frames = list(frames_of(stored))
            if self.target and all(key_id_of(bytes(f[:40])) == self.target for f in frames):
                return
            try:
                rows = b"".join(self.sealer.open_view(f, aad) for f in frames)
            except StoredDataUnreadableError:
                figures.unreadable += 1
                return
        elif self.target:
            rows = stored
        else:
            return  # clear, and encryption is off: as a new write would be
        layout, form = (frame(self.sealer.seal(rows, aad)), "s") if self.target else (rows, "")
        args = RewriteVectorsArgs(len(stored), int(generation or 0), layout, form)
        rewritten = await self._scripts.rewrite_vectors(keys=[meta, key], args=args.argv())
        done = 1 if int(rewritten) else 0
        figures.resealed += done
        figures.skipped += 1 - done

    async def _rotate_agent(self, key: str, figures: RotationFigures) -> None:
        """A registered agent's entry (it may hold the agent's API key), like content."""
        stored = await self.client.get(key)
        if not stored:
            return
        figures.values += 1
        if not self._stale(stored):
            return
        try:
            new = self.sealer.reseal(stored, entry_aad(key))
        except StoredDataUnreadableError:
            figures.unreadable += 1
            return
        args = SwapStringArgs(stored, new).argv()
        done = int(await self._scripts.swap_string(keys=[key], args=args))
        figures.resealed += done
        figures.skipped += 1 - done

    async def _rotate_log(self, key: str, figures: RotationFigures) -> None:
        """A task's event log: its entries' values, sealed like the task's (status events
        under ``<tid>:s``, artifact events under ``<tid>:ev``), re-sealed in one rewrite of
        the stream when any is not current (read a page at a time, written at once)."""
        match = TASK_LOG.match(key)
        assert match is not None
        prefix, context_id, task_id = match.groups()
        figures.logs += 1
        swaps: list[Any] = []
        after = "-"
        while True:
            page = await self.client.xrange(key, after, "+", count=self.batch)
            for entry_id, fields in page:
                figures.values += 1
                value = fields.get(_EVENT_DATA, b"")
                suffix = _LOG_FIELD.get(fields.get(_EVENT_KIND, b""))
                if suffix is None or not self._stale(value):
                    continue
                try:
                    aad = context_of(prefix, context_id, task_id + suffix)
                    swaps += [entry_id, value, self.sealer.reseal(value, aad)]
                except StoredDataUnreadableError:
                    figures.unreadable += 1
            if len(page) < self.batch:
                break
            after = "(" + text_of(page[-1][0])
        if swaps:
            args = SwapLogArgs(swaps).argv()
            done = int(await self._scripts.swap_log(keys=[key], args=args))
            figures.resealed += done
            figures.skipped += len(swaps) // 3 - done

    def _nodes(self) -> list[Any]:
        """What to scan: each primary of a cluster (a cursor each), or the one server."""
        if isinstance(self.client, RedisCluster):
            return list(self.client.get_primaries())
        return [None]

    async def _scan(self, node: Any, cursor: int) -> tuple[int, list[Any]]:
        if node is None:
            cursor, keys = await self.client.scan(cursor, match=TAGGED_KEYS, count=self.batch)
            return int(cursor), keys
        cursors, keys = await self.client.scan(
            cursor, match=TAGGED_KEYS, count=self.batch, target_nodes=node
        )
        return int(next(iter(cursors.values()))), keys

    async def run(self, *, report_every: float = 2.0) -> RotationFigures:
        """Re-seal everything; ``ForeignKeyError`` (nothing done) when a key of this keyring
        is another key than the one of its id that sealed stored data. Once a whole pass
        leaves nothing unreadable, the key registry keeps only the ids still in use."""
        registry = KeyRegistry(self.client, self.sealer)
        problems = await registry.check()
        if problems.foreign:
            raise ForeignKeyError(problems.message())
        await registry.register(self.target or "")
        figures = RotationFigures()
        state = await self.client.hgetall(STATE)
        saved: dict[str, str] = {}
        if state and text_of(state.get(b"target", b"")) == (self.target or "-"):
            saved = {text_of(k): text_of(v) for k, v in state.items()}
            figures.resealed = int(saved.get("resealed", 0))
            figures.unreadable = int(saved.get("unreadable", 0))
            log.info("resuming rotation", extra={"resealed": figures.resealed})
        started = last = time.monotonic()
        for node in self._nodes():
            field = f"cursor:{node.name if node is not None else '-'}"
            if saved.get(field) == "done":
                continue
            cursor = int(saved.get(field, 0))
            while True:
                cursor, keys = await self._scan(node, cursor)
                for key in keys:
                    await self._rotate_hash(text_of(key), figures)
                figures.seconds = time.monotonic() - started
                mapping = {
                    "target": self.target or "-",
                    field: cursor or "done",
                    "resealed": figures.resealed,
                    "unreadable": figures.unreadable,
                }
                await self.client.hset(STATE, mapping=mapping)
                if time.monotonic() - last >= report_every:
                    last = time.monotonic()
                    log.info("rotation progress", extra=_shown(figures))
                if cursor == 0:
                    break
        await self.client.delete(STATE)
        log.info("rotation done", extra=_shown(figures))
        if figures.unreadable == 0:  # no value is sealed with another key any more
            await registry.retire([self.target or ""])
        return figures


def _shown(figures: RotationFigures) -> dict[str, Any]:
    return {
        "hashes": figures.hashes,
        "logs": figures.logs,
        "values": figures.values,
        "resealed": figures.resealed,
        "skipped": figures.skipped,
        "unreadable": figures.unreadable,
        "seconds": round(figures.seconds, 2),
        "per_second": round(figures.rate),
    }


class ReplicasLackKeyError(KeyringError):
    """Live gateway processes do not have the key `rotate-data` would re-seal with."""


async def rotate_data(client: Any, sealer: Sealer) -> RotationFigures:
    """``Rotation.run`` over ``client`` to ``sealer``'s current key, refused
    (``ReplicasLackKeyError``) while a live gateway process does not have that key: it could
    not open what the rotation re-seals."""
    rotation = Rotation(client, sealer)
    if rotation.target:
        lacking = await KeyRegistry(client, rotation.sealer).lacking(rotation.target)
        if lacking:
            raise ReplicasLackKeyError(
                f"{len(lacking)} live gateway process(es) do not have key "
                f"{rotation.target} of GATEWAY_ENCRYPTION_KEYS: restart them with this "
                f"keyring first ({', '.join(sorted(r.name for r in lacking))})"
            )
    return await rotation.run()
