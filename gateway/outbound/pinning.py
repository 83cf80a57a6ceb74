"""Connections that go where the check said: a host name is resolved once per connection,
every address it resolves to is checked, and the connection is made to a checked address.

A check that resolves the name and a connection that resolves it again leave a window:
a name whose answers change (DNS rebinding) passes the check with a public address and
connects to a private one. Here the HTTP client's connection pool (``httpcore`` for
``httpx``, ``httpcore2`` for ``httpx2``) gets a network backend that resolves, hands the
addresses to the guard, and connects to them in turn; the request keeps its URL, so the
``Host`` header, TLS SNI and certificate verification use the host name. A connection
kept alive was checked when it was made.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from gateway.outbound.addresses import Address

__all__ = ["Guard", "Resolver", "pinned_pool", "resolve"]

# host, port -> the addresses the name stands for (raises OSError when it does not resolve)
Resolver = Callable[[str, int], Awaitable[Sequence[Address]]]


class Guard(Protocol):
    def check_name(self, url: str) -> None:
        """Before each request: raise ``OutboundRefused`` unless the URL may be asked for."""

    def check_addresses(self, host: str, port: int, addresses: Sequence[Address]) -> None:
        """Before each connection: raise ``OutboundRefused`` unless every address may be."""


async def resolve(host: str, port: int) -> list[Address]:
    """The system resolver's answer, each address once, in its order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[Address] = []
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if address not in found:
            found.append(address)
    return found


def _backend(core: Any, guard: Guard, resolver: Resolver) -> Any:
    class PinnedBackend(core.AsyncNetworkBackend):  # type: ignore[misc]
        def __init__(self) -> None:
            self._inner = core.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,  # noqa: ASYNC109 (the backend interface)
            local_address: str | None = None,
            socket_options: Iterable[Any] | None = None,
        ) -> Any:
            try:
                async with asyncio.timeout(timeout):
                    addresses = await resolver(host, port)
            except TimeoutError as exc:
                raise core.ConnectTimeout(f"{host} did not resolve in time") from exc
            except (OSError, ValueError) as exc:
                raise core.ConnectError(f"{host} does not resolve") from exc
            if not addresses:
                raise core.ConnectError(f"{host} does not resolve")
            guard.check_addresses(host, port, addresses)  # OutboundRefused: not retried
            failure: Exception | None = None
            for address in addresses:
                try:
                    return await self._inner.connect_tcp(
                        str(address),
                        port,
                        timeout=timeout,
                        local_address=local_address,
                        socket_options=socket_options,
                    )
                except (core.ConnectError, core.ConnectTimeout) as exc:
                    failure = exc
            assert failure is not None
            raise failure

        async def connect_unix_socket(self, path: str, *args: Any, **kwargs: Any) -> Any:
            raise core.ConnectError("unix sockets are not an outbound destination")

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return PinnedBackend()


def pinned_pool(module: Any, guard: Guard, resolver: Resolver, limits: Any) -> Any:
    """A connection pool for ``module``'s ``AsyncHTTPTransport`` (``httpx`` or ``httpx2``)
    whose connections go only to addresses ``guard`` admits."""
    core = importlib.import_module(module.__name__.replace("httpx", "httpcore", 1))
    return core.AsyncConnectionPool(
        ssl_context=module.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_backend(core, guard, resolver),
    )
