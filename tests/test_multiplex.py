"""The multiplexed connection's batches (``store/multiplex.py``) against a real Redis: the
replies of commands written together come back in order, an error in its place."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from gateway.store.multiplex import Multiplexed
from tests.conftest import CLUSTER, RawRedis
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
