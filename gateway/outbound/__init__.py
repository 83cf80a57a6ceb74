"""Outbound safety: which hosts a URL from the agent registry may reach.

``GATEWAY_OUTBOUND_ALLOWLIST`` holds ``host[:port]`` patterns: a host name (``*.`` matches
any subdomain), an IP address or a CIDR block; no port (or ``*``) means any port. With no
patterns, only the hosts of the gateway's own configuration (embedder, Cortadel) are
allowed. A URL is checked when an agent is registered and again before every request:
its host name is resolved, and each address it resolves to must be allowed too — by an
IP/CIDR pattern, by being a public address, or because the name matched a pattern
exactly (an operator-named host is trusted to resolve where it does). A wildcard name
that resolves into a private network is refused, so tenant input cannot turn the
gateway into a proxy into the hospital network. "Public" is ``addresses.is_public``.

The HTTP clients of ``guarded_client`` check each request's URL by name, and each new
connection's addresses as it is made, connecting only to an address checked
(``pinning.py``): the name is resolved once per connection. Webhooks go through such a
client with a guard of their own (``push/destinations.py``), built on an ``Allowlist`` of
``GATEWAY_PUSH_ALLOWLIST``.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import httpx

from gateway.errors import InvalidParamsError
from gateway.outbound.addresses import Address, is_public
from gateway.outbound.pinning import Guard, Resolver, pinned_pool, resolve

__all__ = ["Allowlist", "Guard", "OutboundRefused", "Target", "guarded_client", "literal"]

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


class Target(NamedTuple):
    """Where a URL goes: its scheme, lower-case host (an IPv6 address without brackets)
    and port (the scheme's default if it names none)."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Target:
        """Raises ``OutboundRefused`` for a URL no request could be made to."""
        try:
            parts = urlsplit(url)
            port = parts.port  # ValueError: not a number, or out of range
            httpx.URL(url)  # what the client will make of it
        except (ValueError, httpx.InvalidURL) as exc:
            raise OutboundRefused("the URL is not a valid http(s) URL with a host") from exc
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OutboundRefused("only http and https URLs with a host may be used")
        if parts.username or parts.password:
            raise OutboundRefused("URLs may not carry credentials")
        if port == 0:
            raise OutboundRefused("port 0 is no destination")
        return cls(parts.scheme, parts.hostname.lower(), port or _default_port(parts.scheme))


def literal(host: str) -> Address | None:
    """The address a host is, if it is an IP address rather than a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class Allowlist:
    def __init__(
        self,
        patterns: Iterable[str],
        trusted_urls: Iterable[str | None] = (),
        *,
        setting: str = "GATEWAY_OUTBOUND_ALLOWLIST",
        resolver: Resolver = resolve,
    ) -> None:
        self.setting, self._resolver = setting, resolver
        self._patterns = [_Pattern.parse(p) for p in patterns if p.strip()]
        if not self._patterns:
            for url in trusted_urls:
                if url:
                    parts = urlsplit(url)
                    port = parts.port or _default_port(parts.scheme)
                    self._patterns.append(_Pattern.parse(f"{parts.hostname}:{port}"))

    def by_name(self, host: str, port: int) -> tuple[bool, bool]:
        """(allowed by a name or address pattern, matched a name or address exactly)."""
        exact = allowed = False
        address = literal(host)
        for p in self._patterns:
            if not p.matches_port(port):
                continue
            in_network = p.network is not None and address is not None and address in p.network
            if in_network or (p.host and p.host == host):
                allowed = exact = True
            elif p.host.startswith("*.") and fnmatch.fnmatchcase(host, p.host):
                allowed = True
        return allowed, exact

    def listed(self, address: Address, port: int) -> bool:
        """Whether an address pattern covers the address."""
        return any(
            p.network is not None and p.matches_port(port) and address in p.network
            for p in self._patterns
        )

    def address_allowed(self, address: Address, port: int) -> bool:
        return is_public(address) or self.listed(address, port)

    def check_name(self, url: str) -> None:
        """The registration check, and each request's: the URL's host and port match."""
        target = Target.of(url)
        if not self.by_name(target.host, target.port)[0]:
            raise OutboundRefused(f"{target.host}:{target.port} is not in {self.setting}")

    def check_addresses(self, host: str, port: int, addresses: Sequence[Address]) -> None:
        """Each connection's check: a name matched exactly goes where it resolves; any
        other host only to addresses that are public or match an address pattern."""
        if self.by_name(host, port)[1]:
            return
        for address in addresses:
            if not self.address_allowed(address, port):
                raise OutboundRefused(f"{host} resolves to a non-public address")

    async def check(self, url: str) -> None:
        """The name matches, and so does every address it resolves to (a check ahead of a
        call, for a clear answer; the call's connection is checked again)."""
        self.check_name(url)
        target = Target.of(url)
        try:
            addresses = await self._resolver(target.host, target.port)
        except OSError as exc:
            raise OutboundRefused(f"{target.host} does not resolve") from exc
        self.check_addresses(target.host, target.port, addresses)

    def validate(self, url: str, field: str) -> None:
        """Registration: a refused URL is a 400 naming the field."""
        try:
            self.check_name(url)
        except OutboundRefused as exc:
            raise InvalidParamsError(
                "A URL is not allowed", data={"errors": [{"field": field, "reason": str(exc)}]}
            ) from exc


def guarded_client(
    guard: Guard,
    module: Any = httpx,
    *,
    limits: Any = None,
    resolver: Resolver = resolve,
    **options: Any,
) -> Any:
    """An async HTTP client (of ``module``: ``httpx``, or ``httpx2`` for the ``openai``
    SDK) whose every request's URL passes ``guard.check_name`` and whose every connection
    goes to addresses that pass ``guard.check_addresses``, resolved once (``pinning.py``).
    ``limits`` (the connection pool's) go to the transport: a client given a transport
    ignores its own. Redirects are not followed."""
    pool_limits = (
        limits
        if limits is not None
        else module.Limits(max_connections=100, max_keepalive_connections=20)
    )

    class GuardedTransport(module.AsyncBaseTransport):  # type: ignore[misc]
        def __init__(self) -> None:
            self._inner = module.AsyncHTTPTransport(limits=pool_limits)
            self._inner._pool = pinned_pool(module, guard, resolver, pool_limits)

        async def handle_async_request(self, request: Any) -> Any:
            try:
                guard.check_name(str(request.url))
                return await self._inner.handle_async_request(request)
            except OutboundRefused as exc:
                raise module.ConnectError(f"outbound request refused: {exc}") from exc

        async def aclose(self) -> None:
            await self._inner.aclose()

    options.setdefault("follow_redirects", False)
    return module.AsyncClient(transport=GuardedTransport(), **options)
