"""The multiplexed connection's batches (``store/multiplex.py``) against a real Redis: the
replies of commands written together come back in order, an error in its place."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from gateway.embedded_redis import EmbeddedRedis
from gateway.store.connection import RedisTarget, _HiredisPacking
from gateway.store.multiplex import Multiplexed
from tests.conftest import CLUSTER, AppFactory, RawRedis, post_message
from tests.waiting import until

pytestmark = pytest.mark.skipif(CLUSTER, reason="a cluster keeps redis-py's client")


async def test_a_batch_answers_in_order_and_raises_its_first_error_once_all_are_in(
    redis_url: str,
) -> None:
    hot = Multiplexed.for_url(redis_url, 10.0)
    assert hot is not None
    try:
        assert await hot.execute_many([]) == []
        replies = await hot.execute_many(
            [("SET", "mx:a", "1"), ("INCR", "mx:a"), ("GET", "mx:a"), ("DEL", "mx:a")]
        )
        assert replies == [b"OK", 2, b"2", 1]
        with pytest.raises(ResponseError):
            await hot.execute_many(
                [("SET", "mx:b", "x"), ("INCR", "mx:b"), ("SET", "mx:c", "after")]
            )
        # The command after the error ran, and its reply was read: the next batch's
        # replies are its own.
        assert await hot.execute_many([("GET", "mx:c"), ("DEL", "mx:b", "mx:c")]) == [b"after", 2]
    finally:
        await hot.close()


async def test_a_batch_in_flight_fails_when_its_connection_closes(
    redis_url: str, redis: RawRedis
) -> None:
    hot = Multiplexed.for_url(redis_url, 10.0)
    assert hot is not None
    try:
        await hot.execute("PING")  # connected
        # BLPOP holds the connection's replies back, so the batch is still waiting at close.
        task = asyncio.ensure_future(hot.execute_many([("BLPOP", "mx:nothing", "20"), ("PING",)]))
        await until(lambda: _blocked(redis), timeout=30, what="the BLPOP blocking")
        await hot.close()
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(task, 10)
        assert await hot.execute("PING") in (b"PONG", "PONG", True)  # a new connection
    finally:
        await hot.close()


async def _blocked(redis: RawRedis) -> bool:
    return any(c.get("cmd") == "blpop" for c in await redis.client_list())


async def test_a_unix_socket_url_is_multiplexed_too(tmp_path: Path) -> None:
    """A ``unix://`` REDIS_URL (a Redis on the same host) gets the multiplexed connection as
    a TCP one does: its batches answer in order over the socket."""
    server = EmbeddedRedis(tmp_path / "r")
    server.start()
    try:
        assert server.local_url.startswith("unix://")
        hot = Multiplexed.for_url(server.local_url, 10.0)
        assert hot is not None
        try:
            replies = await hot.execute_many(
                [("SET", "mx:u", "1"), ("INCR", "mx:u"), ("GET", "mx:u")]
            )
            assert replies == [b"OK", 2, b"2"]
        finally:
            await hot.close()
        # as redis-py reads a URL: the first of a repeated db
        first = Multiplexed.for_url(server.local_url.replace("db=0", "db=3&db=4"), 10.0)
        assert first is not None
        try:
            assert b" db=3 " in await first.execute("CLIENT", "INFO")
        finally:
            await first.close()
        # options the multiplexed connection does not take keep redis-py's client
        assert Multiplexed.for_url(f"{server.local_url}&socket_timeout=3", 10.0) is None
    finally:
        server.stop()


async def test_a_gateway_on_a_unix_socket_sends_its_scripts_on_one_connection(
    make_app: AppFactory, tmp_path: Path
) -> None:
    """A gateway given a ``unix://`` REDIS_URL serves sends, and sixteen sends at once put
    their scripts on its one multiplexed connection instead of opening a pooled connection
    each (counted in CLIENT LIST: the clients on the socket)."""
    server = EmbeddedRedis(tmp_path / "r")
    server.start()
    assert server.socket is not None
    admin = Redis.from_url(server.url)  # over TCP: not counted
    try:

        async def on_socket() -> int:
            clients = await admin.client_list()
            return sum(str(c.get("addr", "")).startswith(str(server.socket)) for c in clients)

        async with make_app(redis_url=server.local_url, queue="memory") as client:
            assert (await post_message(client, "first")).status_code == 200
            before = await on_socket()
            replies = await asyncio.gather(*(post_message(client, f"m{i}") for i in range(16)))
            assert [r.json()["task"]["status"]["state"] for r in replies] == ["completed"] * 16
            assert await on_socket() <= before + 1
    finally:
        await admin.aclose()
        server.stop()


async def test_an_empty_password_in_the_url_is_no_password(tmp_path: Path) -> None:
    """``redis://:@host`` names no password, as redis-py reads it: the multiplexed
    connection sends no ``AUTH`` (which a server without a password refuses)."""
    server = EmbeddedRedis(tmp_path / "r", password=False)
    server.start()
    try:
        for url in (server.url.replace("redis://", "redis://:@"), f"unix://:@{server.socket}"):
            hot = Multiplexed.for_url(url, 10.0)
            assert hot is not None
            try:
                assert await hot.execute("PING") == b"PONG"
            finally:
                await hot.close()
    finally:
        server.stop()


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://127.0.0.1:6379/0", "unix:///tmp/r.sock?db=0"]
)
def test_every_standalone_client_packs_commands_with_hiredis(url: str) -> None:
    """redis-py's URL parser picks the connection class of ``rediss://`` and ``unix://``
    itself; the store's client packs with hiredis over all three."""
    pool = RedisTarget.parse(url).client(1.0).connection_pool
    assert issubclass(pool.connection_class, _HiredisPacking)
