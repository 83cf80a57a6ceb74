"""One connection that carries the store's hot scripts for every request at once.

redis-py gives each command a pooled connection of its own: a checkout, a write, a read
and the pool's bookkeeping per command, and every write may wake Redis on its own. On a
send that is most of the gateway process's Redis cost. ``Multiplexed`` writes all the
commands issued in one turn of the event loop in one write on one connection, and hands
the replies back in order (Redis answers a connection's commands in the order it read
them). Under load many sends share a write and a read; alone, a command costs one of
each, as before.

Only short, single commands belong here (the send and update scripts, the audit batches,
the indexer's reads and vectors scripts): a blocking command would hold up every command
behind it, and a transaction (``MULTI``) would take in other requests' commands.
Standalone Redis over TCP, TLS or a unix socket only (``for_url``); a cluster keeps
redis-py's client, which routes each command by slot. Failures are redis-py's exceptions
(``ConnectionError``, ``TimeoutError``, ``ResponseError`` and its kinds), so the store
translates them as it does the client's. A command whose reply is late by the timeout
closes the connection (a hung or half-open peer), failing the commands in flight with it;
the next command connects again. Replies come in order, so one timer per connection
watches the oldest command only, instead of a timeout per command.

With replica acknowledgements on (``replica_ack.py``) one ``WAIT`` follows the writes of
each batch, and each write's reply is handed back once that WAIT counts enough replicas.
Through Sentinel (``follow``) each connection asks for the primary's address first, and a
``READONLY`` reply (the primary was demoted) closes it, so the next connects to the new one.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    NoScriptError,
    ReadOnlyError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.store.replica_ack import ReplicaAck, is_write

__all__ = ["Multiplexed"]

# Error replies by their first word, as redis-py's parser maps them (the rest: ResponseError).
_ERRORS: dict[str, type[Exception]] = {
    "NOSCRIPT": NoScriptError,
    "LOADING": BusyLoadingError,
    "READONLY": ReadOnlyError,
    "NOAUTH": AuthenticationError,
    "WRONGPASS": AuthenticationError,
}


def _error(reply: hiredis.ReplyError) -> Exception:
    text = str(reply)
    return _ERRORS.get(text.split(" ", 1)[0], ResponseError)(text)


class _Link(asyncio.Protocol):
    """One connection: commands written in batches, replies matched to them in order."""

    def __init__(self, timeout: float, ack: ReplicaAck | None = None, follow: bool = False) -> None:
        self._ack, self._follow = ack, follow
        # This turn's writes (their reply, and the future handed out) awaiting its WAIT.
        self._held: list[tuple[asyncio.Future[Any], asyncio.Future[Any]]] = []
        self._reader = hiredis.Reader(replyError=hiredis.ReplyError)
        # Each command's future and the loop time by which its reply is due.
        self._waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self._out: list[bytes] = []
        self._transport: asyncio.Transport | None = None
        self._timeout = timeout
        self._watchdog: asyncio.TimerHandle | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError, "Connection to Redis lost")

    def _fail(self, error: type[Exception], message: str) -> None:
        """Fail every command in flight (each with an exception of its own)."""
        self.lost = True
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(error(message))
        held, self._held = self._held, []
        for _, outer in held:
            if not outer.done():
                outer.set_exception(error(message))

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        demoted = False
        while (reply := self._reader.gets()) is not False:
            future, _ = self._waiting.popleft()
            if future.done():  # its caller gave up (cancelled, timed out)
                continue
            if isinstance(reply, hiredis.ReplyError):
                error = _error(reply)
                if self._follow and isinstance(error, ReadOnlyError):
                    demoted = True
                    error = RedisConnectionError("The primary is now a replica")
                future.set_exception(error)
            else:
                future.set_result(reply)
        if demoted:
            self.close()

    def send(self, args: Sequence[str | bytes | int]) -> asyncio.Future[Any]:
        """Queue a command for this turn's write; its reply comes in the future."""
        if self.lost or self._transport is None:
            raise RedisConnectionError("Connection to Redis lost")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if not self._out:
            loop.call_soon(self._flush)
        self._out.append(hiredis.pack_command(tuple(args)))  # type: ignore[arg-type]  # its stub types a 1-tuple
        due = loop.time() + self._timeout
        self._waiting.append((future, due))
        if self._watchdog is None:
            self._watchdog = loop.call_at(due, self._watch)
        if self._ack is not None and args and is_write(args[0]):
            outer: asyncio.Future[Any] = loop.create_future()
            self._held.append((future, outer))
            return outer
        return future

    def _wait_for_replicas(self) -> None:
        """Follow this turn's writes with one WAIT; hand their replies out when it counts
        enough replicas (``replica_ack.py``), else fail them."""
        held, self._held = self._held, []
        if not held or self._ack is None:
            return
        ack = self._ack
        loop = asyncio.get_running_loop()
        waited: asyncio.Future[Any] = loop.create_future()
        self._out.append(ack.packed)
        self._waiting.append((waited, loop.time() + self._timeout + ack.timeout_ms / 1000))

        def settle(waited: asyncio.Future[Any]) -> None:
            problem: BaseException | None = RedisConnectionError("Connection to Redis lost")
            if not waited.cancelled():
                problem = waited.exception()
            try:
                ack.check(problem if problem is not None else waited.result())
            except Exception as exc:
                problem = exc
            for reply, outer in held:
                if outer.done():
                    continue
                if reply.done() and not reply.cancelled() and reply.exception() is not None:
                    outer.set_exception(reply.exception())  # type: ignore[arg-type]
                elif problem is not None:
                    outer.set_exception(type(problem)(*problem.args))
                elif reply.done() and not reply.cancelled():
                    outer.set_result(reply.result())
                else:
                    outer.set_exception(RedisConnectionError("Connection to Redis lost"))

        waited.add_done_callback(settle)

    def _watch(self) -> None:
        """The oldest command's reply is due: past its time the connection is taken for hung
        or half open (the commands behind it would time out too) and closed, failing every
        command in flight; otherwise look again when it is due."""
        self._watchdog = None
        if not self._waiting:
            return
        due = self._waiting[0][1]
        loop = asyncio.get_running_loop()
        if loop.time() >= due:
            self._fail(RedisTimeoutError, "Timeout reading from Redis")
            if self._transport is not None:
                self._transport.abort()
            return
        self._watchdog = loop.call_at(due, self._watch)

    def _flush(self) -> None:
        if not self.lost:
            self._wait_for_replicas()
        out, self._out = self._out, []
        if out and self._transport is not None and not self.lost:
            self._transport.write(b"".join(out))

    def close(self) -> None:
        """Close it; commands in flight fail now (a hung peer may never let the transport
        finish closing), new ones take another connection."""
        self._fail(RedisConnectionError, "Connection to Redis closed")
        if self._transport is not None:
            self._transport.close()


class Multiplexed:
    """Commands of concurrent requests over one connection to ``host:port``, or to the unix
    socket ``path`` when one is given (see above). ``timeout``: seconds a command (or
    connecting) may take."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout: float,
        *,
        username: str | None = None,
        password: str | None = None,
        db: int = 0,
        tls: bool = False,
        path: str | None = None,
        ack: ReplicaAck | None = None,
    ) -> None:
        self._host, self._port, self._timeout, self._path = host, port, timeout, path
        self._ack = ack
        # Where the primary is now (Sentinel), asked before each connection: None, fixed.
        self._locate: Callable[[], Awaitable[tuple[str, int]]] | None = None
        self._hello: list[tuple[str | bytes | int, ...]] = []
        if password is not None:
            self._hello.append(("AUTH", username, password) if username else ("AUTH", password))
        if db:
            self._hello.append(("SELECT", db))
        self._tls = ssl.create_default_context() if tls else None
        self._link: _Link | None = None
        self._connecting = asyncio.Lock()

    def follow(self, locate: Callable[[], Awaitable[tuple[str, int]]]) -> None:
        """Connect wherever ``locate`` says the primary is (Sentinel's discovery)."""
        self._locate = locate

    @classmethod
    def for_url(cls, url: str, timeout: float, ack: ReplicaAck | None = None) -> Multiplexed | None:
        """For a standalone ``redis://`` or ``rediss://`` URL without options, or a
        ``unix://`` one with at most ``?db=N``; None for anything else (TLS or socket
        options in the query), which keeps redis-py's client."""
        parts = urlsplit(url)
        # as redis-py reads them: an empty password is none, a path and values unquoted,
        # the first of a repeated option
        username = unquote(parts.username) if parts.username else None
        password = unquote(parts.password) if parts.password else None
        if parts.scheme == "unix":
            query = parse_qs(parts.query)
            db = query.pop("db", ["0"])[0]
            if query or not parts.path or not db.isdigit():
                return None
            path = unquote(parts.path)
            return cls(
                "", 0, timeout, username=username, password=password, db=int(db), path=path,
                ack=ack,
            )  # fmt: skip
        if parts.scheme not in ("redis", "rediss") or parts.query or not parts.hostname:
            return None
        path = parts.path.strip("/")
        return cls(
            parts.hostname,
            parts.port or 6379,
            timeout,
            username=username,
            password=password,
            db=int(path) if path.isdigit() else 0,
            tls=parts.scheme == "rediss",
            ack=ack,
        )

    async def script(self, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run a registered script (``EVALSHA``); one Redis no longer holds (a restart, a
        ``SCRIPT FLUSH``) is loaded again through redis-py's client, which runs it too."""
        try:
            return await self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await script(keys=list(keys), args=list(args))

    async def scripts(
        self, script: AsyncScript, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]
    ) -> list[Any]:
        """Run a registered script once per (keys, args), all in one write, as ``script``
        does; the replies in order."""
        commands = [("EVALSHA", script.sha, len(keys), *keys, *args) for keys, args in calls]
        replies = await self._replies(commands)
        for n, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                keys, args = calls[n]
                replies[n] = await script(keys=list(keys), args=list(args))
            elif isinstance(reply, Exception):
                raise reply
        return replies

    async def execute(self, *args: Any) -> Any:
        link = self._link
        if link is None or link.lost:
            link = await self._connected()
        return await link.send(args)

    async def execute_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Several commands in one write (one future each, no task); the replies in order,
        or the first command's error once every reply is in."""
        replies = await self._replies(commands)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def _replies(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """The commands' replies in order, an error reply as its exception."""
        link = await self._connected()
        futures = [link.send(command) for command in commands]
        replies: list[Any] = await asyncio.gather(*futures, return_exceptions=True)
        return replies

    async def close(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            link.close()

    async def _connected(self) -> _Link:
        link = self._link
        if link is not None and not link.lost:
            return link
        async with self._connecting:
            if self._link is not None and not self._link.lost:
                return self._link
            self._link = await self._connect()
            return self._link

    async def _connect(self) -> _Link:
        loop = asyncio.get_running_loop()
        link: _Link | None = None
        follow = self._locate is not None

        def made() -> _Link:
            return _Link(self._timeout, self._ack, follow)

        try:
            async with asyncio.timeout(self._timeout):
                host, port = self._host, self._port
                if self._locate is not None:
                    host, port = await self._locate()
                if self._path is not None:
                    _, link = await loop.create_unix_connection(made, self._path)
                else:
                    _, link = await loop.create_connection(made, host, port, ssl=self._tls)
                for command in self._hello:
                    await link.send(command)
        except BaseException as exc:
            if link is not None:
                link.close()
            if isinstance(exc, TimeoutError):
                raise RedisTimeoutError("Timeout connecting to Redis") from None
            if isinstance(exc, OSError):
                raise RedisConnectionError(f"Error connecting to Redis: {exc}") from None
            raise
        return link
