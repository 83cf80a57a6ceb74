"""Scrubbed content leaves the disk: after a scrub, Redis rewrites its files within a bound.

A scrub deletes the keys, but Redis's append-only file still holds every write that made
them, and an RDB snapshot the state it was taken in. Rewriting them (``BGREWRITEAOF``, and
``BGSAVE`` when snapshots are on) writes the data set as it is now, without the scrubbed
content, and replaces the old files.

Debounced: the first scrub since the last rewrite records when the next one is due
(``REWRITE_DUE``, ``SET NX``: later scrubs do not push it back), and the maintenance leader,
which ticks every 0.25–2 s, starts the rewrite once it is due. The leader takes the mark
(``GETDEL``) before it asks for the rewrite, so a scrub that finds the mark still set ran
before the rewrite began and is covered by it, and one that comes after sets a new mark.
Redis queues a rewrite asked for while another runs, so none is lost.
"""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import ResponseError

from gateway.clock import now_ms
from gateway.store.keys import REWRITE_DUE
from gateway.store.translate import translated

__all__ = ["DiskRewrite"]

log = logging.getLogger("gateway.store")


class DiskRewrite:
    def __init__(self, client: Any, after_seconds: float) -> None:
        self.client = client
        self.after_ms = int(after_seconds * 1000)

    @translated
    async def schedule(self) -> None:
        """After a scrub: a rewrite is due within the bound (unless one is already due)."""
        await self.client.set(REWRITE_DUE, now_ms() + self.after_ms, nx=True)

    @translated
    async def run_if_due(self) -> bool:
        """Start the rewrite when it is due (the maintenance leader calls this); whether it
        was started."""
        due = await self.client.get(REWRITE_DUE)
        if due is None or int(due) > now_ms():
            return False
        if await self.client.getdel(REWRITE_DUE) is None:
            return False  # another process took it
        try:
            await self._rewrite()
        except ResponseError:
            # Put the mark back: tried again after the delay.
            await self.client.set(REWRITE_DUE, now_ms() + self.after_ms, nx=True)
            log.warning("disk rewrite after a scrub refused by Redis; will retry")
            return False
        log.info("disk rewrite after a scrub started")
        return True

    async def _rewrite(self) -> None:
        persistence = await self.client.info("persistence")
        if int(persistence.get("aof_enabled", 0)):
            try:
                await self.client.bgrewriteaof()
            except ResponseError as exc:
                if "already in progress" not in str(exc):
                    raise
        if await self._snapshots_on():
            await self.client.execute_command("BGSAVE", "SCHEDULE")

    async def _snapshots_on(self) -> bool:
        """Whether RDB snapshots are configured (``save`` rules); a Redis that refuses
        CONFIG (a managed service, whose snapshots are its operator's) is taken not to."""
        try:
            rules = (await self.client.config_get("save")).get("save")
        except ResponseError:
            return False
        text = rules.decode() if isinstance(rules, bytes) else str(rules or "")
        return bool(text.strip())
