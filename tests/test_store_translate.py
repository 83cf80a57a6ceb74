"""The store's one translation of Redis client failures: what redis-py raises while a Redis
cannot serve is a 503 (``StoreUnavailableError``), what the gateway's own code raises is not."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection

from gateway.errors import StoreUnavailableError
from gateway.store.translate import translated


async def test_a_connection_the_client_closed_under_a_command_is_unavailable() -> None:
    """redis-py's cluster client closes every connection on CLUSTERDOWN; a command already
    on one of them then fails inside the client with AttributeError (seen as a 500 during a
    cluster's loss of its slots). The same failure, from a connection never opened."""

    @translated
    async def command() -> None:
        await Connection()._send_packed_command([b"PING\r\n"])

    with pytest.raises(StoreUnavailableError) as raised:
        await command()
    assert isinstance(raised.value.__cause__, AttributeError)


async def test_the_gateways_own_errors_are_not_taken_for_an_unavailable_redis() -> None:
    @translated
    async def defect() -> None:
        raise RuntimeError("a defect of the gateway")

    with pytest.raises(RuntimeError, match="a defect"):
        await defect()
