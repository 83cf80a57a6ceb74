"""The Redis clients of a process, from settings: the one place that reads REDIS_URL and the
settings of how to reach it (``store/connection.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from dataclasses import dataclass

from redis.asyncio import Redis

from gateway import tracing
from gateway.settings import Settings
from gateway.store.connection import RedisClient, RedisTarget
from gateway.store.multiplex import Multiplexed

__all__ = ["Connections", "consumer_name"]


def consumer_name() -> str:
    """This process's name among the consumers of a job stream (and the key registry's)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class Connections:
    """The data client, and in a runtime the multiplexed connection of the hot scripts
    (``multiplex.py``; None on a cluster or while tracing) and the pub/sub connection of the
    task events. ``ConfigurationError`` without REDIS_URL."""

    target: RedisTarget
    client: RedisClient
    timeout: float  # seconds a command (or connecting) may take
    hot: Multiplexed | None = None
    events: Redis | None = None

    @classmethod
    def command(cls, settings: Settings) -> Connections:
        """What a command needs (`gateway keys`, `encryption`, the keyring check): the
        data client alone."""
        target = RedisTarget.from_settings(settings)
        timeout = settings.redis_timeout_seconds
        return cls(target, target.client(timeout), timeout)

    @classmethod
    def process(cls, settings: Settings) -> Connections:
        """A runtime's: the data client, the hot connection and the events connection
        (``tracing.configure`` first: a traced process has no hot connection)."""
        connections = cls.command(settings)
        connections.hot = connections.target.multiplexed(
            connections.timeout, traced=tracing.enabled()
        )
        connections.events = connections.target.events_client(connections.timeout)
        return connections

    async def close(self) -> None:
        """Close every connection, each within the timeout."""
        if self.hot is not None:
            await self.hot.close()
        for client in (self.client, self.events):
            if client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.aclose(), self.timeout)
