"""What every part of the store shares (``StoreBase``): the client and its hot connection,
the scripts, the context TTL, and the sealing of content.

Content (messages, status, artifacts, metadata) is sealed here on its way in and opened on
its way out (``sealing.py``): nothing above the store sees ciphertext, nothing below it
plaintext. A value that does not open is shown as its stand-in (``unreadable.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from gateway.errors import StoredDataUnreadableError
from gateway.models import Task
from gateway.principal import Principal
from gateway.store import fields as f
from gateway.store import unreadable
from gateway.store.assembly import assemble_task, with_open_artifact
from gateway.store.assembly import text_of as _text
from gateway.store.disk_rewrite import DiskRewrite
from gateway.store.embed_texts import EmbedTexts
from gateway.store.fields import task_field
from gateway.store.keys import CONTEXT_KEY_COUNT, UserKeys, keys_of
from gateway.store.lua import Scripts
from gateway.store.multiplex import Multiplexed
from gateway.store.sealing import Sealer, context_of
from gateway.store.translate import translated as _translated

__all__ = ["RunInputs", "StoreBase"]


@dataclass(frozen=True)
class RunInputs:
    """What a run gives the agent: its message (at ``seq``) and the referenced tasks (their
    status and artifacts); its history is the context's messages up to ``last`` bar its own
    and those still ``waiting`` for the task (a run that waited its turn sees the replies to
    the messages before it)."""

    message: dict[str, Any]
    seq: int
    referenced: list[Task]
    last: int = 0  # the context's last message when the run began (0: the one before seq)
    waiting: frozenset[int] = frozenset()


class StoreBase:
    """The store's state, and the sealing and assembly every read and write shares."""

    def __init__(
        self,
        client: Any,
        ttl_seconds: int,
        *,
        cluster: bool = False,
        sealer: Sealer | None = None,
        hot: Multiplexed | None = None,
    ) -> None:
        self.client: Redis = client
        # The send and update scripts of concurrent requests, written together on one
        # connection (multiplex.py); None: through ``client`` like every other command.
        self.hot = hot
        self.ttl_ms = ttl_seconds * 1000
        self.cluster = cluster
        # Webhooks get artifact updates (GATEWAY_PUSH_ARTIFACTS): updates name their artifacts.
        self.push_artifacts = False
        # Cluster mode: a delivery taken to be moved to the push stream is taken again by
        # another mover (maintenance) if it is still there this long after.
        self.push_lease_ms = 30_000
        self.scripts = Scripts.register(client)
        self.sealer = sealer or Sealer(None)
        # Set when scrubs schedule a rewrite of Redis's files (see disk_rewrite.py).
        self.disk_rewrite: DiskRewrite | None = None
        # Set when this process's indexer takes the texts of its sends (embed_texts.py).
        self.embed_texts: EmbedTexts | None = None

    async def _hot(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """A script on the hot path: multiplexed when the store has a hot connection."""
        if self.hot is not None:
            return await self.hot.script(script, keys, args)
        return await script(keys=keys, args=args)

    async def _read(self, command: str, key: str, *args: Any) -> Any:
        """A short read on the hot path (a task's polling, a waiter's check): multiplexed
        when the store has a hot connection, beside the scripts."""
        if self.hot is not None:
            return await self.hot.execute(command, key, *args)
        return await self.client.execute_command(command, key, *args)  # type: ignore[no-untyped-call]

    # -- sealing: every content field is bound to its user, context and field --------------

    def open_message(self, keys: UserKeys, context_id: str, raw: bytes) -> bytes:
        return self.sealer.open(raw, context_of(keys.prefix, context_id, "msg"))

    def _seal(self, keys: UserKeys, context_id: str, field: str, plain: bytes) -> bytes:
        return self.sealer.seal(plain, context_of(keys.prefix, context_id, field))

    def _open(self, keys: UserKeys, context_id: str, field: str, raw: Any) -> Any:
        if raw is None or raw == b"":
            return raw
        return self.sealer.open(raw, context_of(keys.prefix, context_id, field))

    def _open_or(
        self, keys: UserKeys, context_id: str, field: str, raw: Any, stand_in: Callable[[], bytes]
    ) -> Any:
        """``_open``, or ``stand_in()`` (``unreadable.py``) when the value does not open."""
        try:
            return self._open(keys, context_id, field, raw)
        except StoredDataUnreadableError:
            return stand_in()

    def _open_artifacts(
        self,
        keys: UserKeys,
        context_id: str,
        task_id: str,
        raw: Any,
        known: Mapping[bytes, bytes] | None = None,
    ) -> Any:
        aad = context_of(keys.prefix, context_id, task_field(task_id, f.ARTIFACTS))
        return self.sealer.open_artifacts(raw, aad, known, unreadable.artifact)

    def _task(
        self,
        keys: UserKeys,
        context_id: str,
        task_id: str,
        fields: Sequence[Any],
        history: list[bytes] | None,
        streamed: Any = None,
    ) -> Task:
        """A task from its stored (sealed) status, artifacts, metadata and agent metadata;
        ``streamed``: the artifact a run is streaming, shown after the others. A value that
        does not open is shown as its stand-in (``unreadable.py``)."""
        status, arts, metadata, extra = fields

        def opened(suffix: str, raw: Any, stand_in: Callable[[], bytes]) -> Any:
            return self._open_or(keys, context_id, task_field(task_id, suffix), raw, stand_in)

        arts = self._open_artifacts(keys, context_id, task_id, arts)
        streamed = opened(f.OPEN_ARTIFACT, streamed, lambda: unreadable.artifact("streamed"))
        return assemble_task(
            task_id,
            context_id,
            opened(f.STATUS, status, lambda: unreadable.status(context_id)),
            with_open_artifact(arts, streamed),
            history,
            opened(f.METADATA, metadata, unreadable.metadata),
            opened(f.AGENT_METADATA, extra, unreadable.metadata),
        )

    def _history(
        self,
        keys: UserKeys,
        context_id: str,
        seqs: Sequence[Any],
        raw: Sequence[Any],
        *,
        stand_ins: bool = True,
    ) -> list[bytes]:
        """The stored messages ``raw`` (at ``seqs``), opened; one that does not open is its
        stand-in (``unreadable.py``), or left out without ``stand_ins``."""
        out = []
        for seq, m in zip(seqs, raw, strict=True):
            if m is None:
                continue
            try:
                out.append(self.open_message(keys, context_id, m))
            except StoredDataUnreadableError:
                if stand_ins:
                    out.append(unreadable.message(context_id, seq))
        return out

    def _run_inputs(
        self,
        keys: UserKeys,
        context_id: str,
        reference_ids: Sequence[str],
        seq: int,
        message_json: bytes,
        raw: list[Any],
    ) -> RunInputs:
        """A run's inputs: its message (clear JSON) and the referenced tasks as stored."""
        referenced = []
        for n, tid in enumerate(reference_ids):
            status, arts = raw[2 * n], raw[2 * n + 1]
            if status is not None:
                stored = (status, arts, None, None)
                referenced.append(self._task(keys, context_id, tid, stored, None))
        return RunInputs(orjson.loads(message_json), seq, referenced)

    def _keys(self, keys: UserKeys, context_id: str) -> list[str]:
        """A context script's keys; on a cluster without the streams (another slot)."""
        all_keys = keys.context(context_id).all()
        return all_keys[:CONTEXT_KEY_COUNT] if self.cluster else all_keys

    def _subject(self, keys: UserKeys, context_id: str, raw: Any) -> str | None:
        opened = self._open(keys, context_id, f.META_SUBJECT, raw)
        return _text(opened) if opened else None

    def subject_token(self, principal: Principal, context_id: str, subject: str) -> str:
        """A context's subject as a job may carry it: sealed as in the context's meta."""
        keys = keys_of(principal)
        aad = context_of(keys.prefix, context_id, f.META_SUBJECT)
        return self.sealer.seal_token(subject.encode(), aad).decode()

    def open_subject_token(self, keys: UserKeys, context_id: str, token: str) -> str:
        return _text(self._open(keys, context_id, f.META_SUBJECT, token.encode()))

    @_translated
    async def ping(self) -> bool:
        return bool(await self.client.ping())
