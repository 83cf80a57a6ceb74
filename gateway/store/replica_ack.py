"""Writes acknowledged by replicas: ``GATEWAY_REDIS_MIN_REPLICAS_ACK``.

Redis replicates asynchronously: a primary that dies before its replicas have a write takes
the write with it, and a promoted replica never had it. With a minimum of N, every command
that changes data is followed, on the same connection, by ``WAIT N timeout`` (Redis waits
until N replicas have every write that connection made, or the timeout passes); a command
whose WAIT counts fewer replicas fails with ``ReplicaAckError``, so what the gateway
reports done to a client is on N replicas as well as the primary. It is done where every
command is written and read, in the connection (``connection.py``) and the multiplexed
link (``multiplex.py``, one WAIT for all the writes of one batch), so no write of any store
is left out, and on a cluster each WAIT goes to the shard primary that took the write.

Commands inside ``MULTI`` are covered by the WAIT after ``EXEC``. Reads and pub/sub are left
alone. A WAIT that counts enough replicas costs one round trip from the primary to its
replicas.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import hiredis
from redis.exceptions import ResponseError

__all__ = ["ReplicaAck", "ReplicaAckError", "ReplicaAcked", "is_write"]


class ReplicaAckError(ResponseError):
    """Fewer replicas than required acknowledged a write in time: the write is on the
    primary, but not reported done (a client's retry, idempotent by its id, waits again).
    A reply error, as far as redis-py is concerned: a pipeline reads the replies after it
    rather than leaving them on the connection."""


# Commands that change data, by name (upper case), as the gateway uses them. A script is
# taken for a write: a read-only one costs a WAIT that returns at once.
_WRITES = frozenset(
    {
        "EVALSHA", "EVAL", "FCALL", "EXEC",
        "SET", "SETEX", "PSETEX", "SETNX", "GETDEL", "GETEX", "DEL", "UNLINK", "COPY",
        "RENAME", "RENAMENX", "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "PERSIST",
        "INCR", "INCRBY", "DECR", "DECRBY", "INCRBYFLOAT", "APPEND", "MSET", "MSETNX",
        "HSET", "HSETNX", "HMSET", "HDEL", "HINCRBY", "HINCRBYFLOAT",
        "SADD", "SREM", "SPOP", "SMOVE",
        "ZADD", "ZREM", "ZINCRBY", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZPOPMIN", "ZPOPMAX",
        "LPUSH", "RPUSH", "LPOP", "RPOP", "LTRIM", "LREM", "LSET", "LMOVE",
        "XADD", "XACK", "XDEL", "XTRIM", "XCLAIM", "XAUTOCLAIM", "XGROUP", "XSETID",
        "XREADGROUP",
    }
)  # fmt: skip


def _name(command: Any) -> str:
    if isinstance(command, bytes):
        return command.decode("ascii", "replace").upper()
    return str(command).upper()


def is_write(command: Any) -> bool:
    """Whether the command (its first word) changes data."""
    return _name(command).split(" ", 1)[0] in _WRITES


@dataclass(frozen=True)
class ReplicaAck:
    """``replicas`` must have each write within ``timeout_ms``."""

    replicas: int
    timeout_ms: int

    @property
    def wait(self) -> tuple[str, int, int]:
        return ("WAIT", self.replicas, self.timeout_ms)

    @property
    def packed(self) -> bytes:
        packed: bytes = hiredis.pack_command(self.wait)  # type: ignore[arg-type]  # its stub types a 1-tuple
        return packed

    def check(self, acknowledged: Any) -> None:
        """Raise unless WAIT's reply counts enough replicas. An error reply (a primary
        demoted meanwhile: "WAIT cannot be used with replica instances") counts none."""
        if isinstance(acknowledged, ResponseError):
            raise ReplicaAckError(f"WAIT failed: {acknowledged}")
        if isinstance(acknowledged, Exception):
            raise acknowledged
        if int(acknowledged) < self.replicas:
            raise ReplicaAckError(
                f"{acknowledged} of {self.replicas} replicas acknowledged the write in time"
            )


class _Packed(list[bytes]):
    """Packed commands, and for each whether a WAIT follows it."""

    waits: list[bool]


class ReplicaAcked:
    """A redis-py connection (a mixin, first in its bases) that follows each write with
    WAIT and fails it, once its own reply is read, unless enough replicas have it. The
    class is made per setting (``connection._acked``). What a command expects is recorded
    when it is written, not packed: connecting, between the two, writes and reads the
    handshake's commands."""

    replica_ack: ReplicaAck

    def _waits(self) -> deque[bool]:
        # per command written, in order: whether a WAIT reply follows its reply
        waits: deque[bool] | None = self.__dict__.get("_ack_waits")
        if waits is None:
            waits = self.__dict__["_ack_waits"] = deque()
        return waits

    def pack_command(self, *args: Any) -> list[bytes]:
        packed = _Packed(super().pack_command(*args))  # type: ignore[misc]
        name = _name(args[0]) if args else ""
        if name == "MULTI":
            self.__dict__["_ack_multi"] = True
        in_multi = self.__dict__.get("_ack_multi", False)
        if name in ("EXEC", "DISCARD"):
            self.__dict__["_ack_multi"] = False
        follow = (not in_multi or name == "EXEC") and name in _WRITES
        if follow:
            packed.append(self.replica_ack.packed)
        packed.waits = [follow]
        collecting: list[bool] | None = self.__dict__.get("_ack_collect")
        if collecting is not None:
            collecting.append(follow)
        return packed

    def pack_commands(self, commands: Any) -> list[bytes]:
        collecting = self.__dict__["_ack_collect"] = []
        try:
            packed = _Packed(super().pack_commands(commands))  # type: ignore[misc]
        finally:
            self.__dict__.pop("_ack_collect", None)
        packed.waits = collecting
        return packed

    async def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> None:
        await super().send_packed_command(command, *args, **kwargs)  # type: ignore[misc]
        self._waits().extend(getattr(command, "waits", ()))

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        waits = self._waits()
        if not waits or not waits.popleft():
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        ack = self.replica_ack
        refused: ResponseError | None = None
        try:
            reply = await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError as exc:  # a reply: the connection is still in step
            refused, reply = exc, None
        # Any other failure (the connection lost, a timeout) has left the connection
        # disconnected: there is no WAIT reply to read, and the failure is the answer.
        # WAIT blocks up to its timeout: allow for it over the connection's own. Its error
        # reply must not hide the command's (a MOVED the client follows).
        timeout = (getattr(self, "socket_timeout", None) or 0) + ack.timeout_ms / 1000
        try:
            acknowledged = await super().read_response(timeout=timeout)  # type: ignore[misc]
        except ResponseError as exc:
            acknowledged = exc
        if refused is not None:
            raise refused
        ack.check(acknowledged)
        return reply

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self.__dict__.pop("_ack_waits", None)
        self.__dict__.pop("_ack_multi", None)
        await super().disconnect(*args, **kwargs)  # type: ignore[misc]
