"""The store's one translation of Redis client failures: what redis-py raises while a Redis
cannot serve is a 503 (``StoreUnavailableError``), what the gateway's own code raises is not."""

from __future__ import annotations

import asyncio

import pytest
import uvloop
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


def test_a_connection_whose_transport_closed_under_a_command_is_unavailable() -> None:
    """Under uvloop (what `gateway serve` runs), the same command on a connection whose
    transport the client closed fails in the event loop's own code with RuntimeError ("the
    handler is closed"), below redis-py: a 503 too (seen as a 500 during a cluster's loss of
    its slots)."""

    async def scenario() -> None:
        accepted: list[asyncio.StreamWriter] = []
        server = await asyncio.start_server(lambda _r, w: accepted.append(w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = Connection(host="127.0.0.1", port=port)
        connection._reader, connection._writer = await asyncio.open_connection("127.0.0.1", port)
        connection._writer.transport.close()  # as the client's disconnect does
        await asyncio.sleep(0)  # the transport is closed, its stream still referenced

        @translated
        async def command() -> None:
            await connection._send_packed_command([b"PING\r\n"])

        try:
            with pytest.raises(StoreUnavailableError) as raised:
                await command()
            assert isinstance(raised.value.__cause__, RuntimeError)
        finally:
            await connection.disconnect()
            for writer in accepted:
                writer.close()
            server.close()
            await server.wait_closed()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())
