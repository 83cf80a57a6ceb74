"""Outbound safety: which hosts a URL from the agent registry may reach.

``GATEWAY_OUTBOUND_ALLOWLIST`` holds ``host[:port]`` patterns: a host name (``*.`` matches
any subdomain), an IP address or a CIDR block; no port (or ``*``) means any port. With no
patterns, only the hosts of the gateway's own configuration (embedder, Cortadel) are
allowed. A URL is checked when an agent is registered and again before every request:
its host name is resolved, and each address it resolves to must be allowed too — by an
IP/CIDR pattern, by being a public address, or because the name matched a pattern
exactly (an operator-named host is trusted to resolve where it does). A wildcard name
that resolves into a private network is refused, so tenant input cannot turn the
gateway into a proxy into the hospital network.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from gateway.errors import InvalidParamsError

__all__ = ["Allowlist", "OutboundRefused", "guarded_client"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundRefused(Exception):
    """The URL may not be reached (the message names the host, never credentials)."""


@dataclass(frozen=True)
class _Pattern:
    host: str  # lower-case name or glob, or '' for a network pattern
    network: Network | None
    port: int | None  # None: any

    @classmethod
    def parse(cls, raw: str) -> _Pattern:
        text = raw.strip().lower()
        port: int | None = None
        if text.startswith("["):  # [v6]:port
            host, _, rest = text[1:].partition("]")
            if rest.startswith(":") and rest[1:] not in ("", "*"):
                port = int(rest[1:])
        elif text.count(":") == 1:
            host, _, port_text = text.partition(":")
            port = None if port_text in ("", "*") else int(port_text)
        else:
            host = text
        try:
            return cls("", ipaddress.ip_network(host, strict=False), port)
        except ValueError:
            return cls(host, None, port)

    def matches_port(self, port: int) -> bool:
        return self.port is None or self.port == port


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


class Allowlist:
    def __init__(self, patterns: Iterable[str], trusted_urls: Iterable[str | None] = ()) -> None:
        self._patterns = [_Pattern.parse(p) for p in patterns if p.strip()]
        if not self._patterns:
            for url in trusted_urls:
                if url:
                    parts = urlsplit(url)
                    port = parts.port or _default_port(parts.scheme)
                    self._patterns.append(_Pattern.parse(f"{parts.hostname}:{port}"))

    def _by_name(self, host: str, port: int) -> tuple[bool, bool]:
        """(allowed by a name or address pattern, matched a name exactly)."""
        exact = allowed = False
        try:
            address: Address | None = ipaddress.ip_address(host)
        except ValueError:
            address = None
        for p in self._patterns:
            if not p.matches_port(port):
                continue
            in_network = p.network is not None and address is not None and address in p.network
            if in_network or (p.host and p.host == host):
                allowed = exact = True
            elif p.host.startswith("*.") and fnmatch.fnmatchcase(host, p.host):
                allowed = True
        return allowed, exact

    def _address_allowed(self, address: Address, port: int) -> bool:
        if address.is_global:
            return True
        return any(
            p.network is not None and p.matches_port(port) and address in p.network
            for p in self._patterns
        )

    @staticmethod
    def _split(url: str) -> tuple[str, int]:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OutboundRefused("only http and https URLs with a host may be used")
        if parts.username or parts.password:
            raise OutboundRefused("URLs may not carry credentials")
        return parts.hostname.lower(), parts.port or _default_port(parts.scheme)

    def check_name(self, url: str) -> None:
        """The registration check: the URL's host and port match a pattern."""
        host, port = self._split(url)
        if not self._by_name(host, port)[0]:
            raise OutboundRefused(f"{host}:{port} is not in GATEWAY_OUTBOUND_ALLOWLIST")

    async def check(self, url: str) -> None:
        """The call-time check: the name matches, and so does every address it resolves to."""
        host, port = self._split(url)
        allowed, exact = self._by_name(host, port)
        if not allowed:
            raise OutboundRefused(f"{host}:{port} is not in GATEWAY_OUTBOUND_ALLOWLIST")
        if exact:
            return
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise OutboundRefused(f"{host} does not resolve") from exc
        for info in infos:
            address = ipaddress.ip_address(info[4][0])
            if not self._address_allowed(address, port):
                raise OutboundRefused(f"{host} resolves to a non-public address")

    def validate(self, url: str, field: str) -> None:
        """Registration: a refused URL is a 400 naming the field."""
        try:
            self.check_name(url)
        except OutboundRefused as exc:
            raise InvalidParamsError(
                "A URL is not allowed", data={"errors": [{"field": field, "reason": str(exc)}]}
            ) from exc


def guarded_client(
    allowlist: Allowlist, module: Any = httpx, *, limits: Any = None, **options: Any
) -> Any:
    """An async HTTP client (of ``module``: ``httpx``, or ``httpx2`` for the ``openai``
    SDK) whose every request is checked against ``allowlist`` before it is sent. ``limits``
    (the connection pool's) go to the transport: a client given a transport ignores its
    own."""

    class GuardedTransport(module.AsyncBaseTransport):  # type: ignore[misc]
        def __init__(self) -> None:
            pool = {"limits": limits} if limits is not None else {}
            self._inner = module.AsyncHTTPTransport(**pool)

        async def handle_async_request(self, request: Any) -> Any:
            try:
                await allowlist.check(str(request.url))
            except OutboundRefused as exc:
                raise module.ConnectError(f"outbound request refused: {exc}") from exc
            return await self._inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self._inner.aclose()

    return module.AsyncClient(transport=GuardedTransport(), **options)
