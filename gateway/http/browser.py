"""What a web browser may do with the gateway: which Host and Origin it answers, and the
headers that keep answers out of caches and away from content sniffing.

In open mode (no API keys) every caller is the local operator, so no web page may reach the
gateway: neither a page of another site (its ``Origin``) nor a name an attacker's DNS points
at 127.0.0.1 (DNS rebinding: the ``Host`` is the attacker's name). Only loopback names are
answered, plus ``GATEWAY_ALLOWED_HOSTS``. With API keys a browser holds no ambient
credential, so any Host is answered unless ``GATEWAY_ALLOWED_HOSTS`` names the hosts. Names
compare case-insensitively, and one rule serves every surface (REST, JSON-RPC, MCP).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import HostNotAllowedError
from gateway.http.headers import header
from gateway.http.response_start import on_start
from gateway.http.responses import error_response

__all__ = ["LOOPBACK_NAMES", "BrowserGuardMiddleware", "HostRule"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
# Every answer may carry a patient's data: no cache keeps it, no browser sniffs it into
# something executable, no page frames it.
_HEADERS = [
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
]


def _name(host: str) -> str:
    """The host name of a ``Host`` value, without its port (``[::1]:80`` → ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.partition(":")[0]


@dataclass(frozen=True)
class HostRule:
    """The host names answered (None: any) and whether a request's Origin must name one of
    them or a configured CORS origin."""

    names: frozenset[str] | None
    check_origin: bool
    cors_origins: frozenset[str] = frozenset()

    @classmethod
    def build(
        cls, *, open_mode: bool, allowed_hosts: Iterable[str], cors_origins: Iterable[str]
    ) -> HostRule:
        extra = {_name(h) for h in allowed_hosts if h.strip()}
        restricted = open_mode or bool(extra)
        return cls(
            names=frozenset({*LOOPBACK_NAMES, *extra}) if restricted else None,
            check_origin=open_mode,
            cors_origins=frozenset(o.rstrip("/").lower() for o in cors_origins),
        )

    def host_allowed(self, host: str | None) -> bool:
        return self.names is None or (host is not None and _name(host) in self.names)

    def origin_allowed(self, origin: str | None) -> bool:
        if not self.check_origin or origin is None:
            return True
        origin = origin.strip().lower()
        if origin in self.cors_origins:
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        return parts.scheme in ("http", "https") and self.host_allowed(parts.netloc)

    @staticmethod
    def mcp_security() -> TransportSecuritySettings:
        """The MCP SDK's own DNS-rebinding check is off: ``BrowserGuardMiddleware`` applies
        this rule to ``/mcp`` as to every other route (the SDK's would compare Host and
        Origin case-sensitively, and answer in a body of its own)."""
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)


class BrowserGuardMiddleware:
    """Refuses hosts and origins the rule does not answer (421), and adds the headers above
    to every answer."""

    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app, self.rule = app, rule

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # The app's awaitable, not awaited here (see stack.py).
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        on_start(scope, _harden)
        raw = scope["headers"]
        if not (
            self.rule.host_allowed(header(raw, b"host"))
            and self.rule.origin_allowed(header(raw, b"origin"))
        ):
            return error_response(HostNotAllowedError())(scope, receive, send)
        return self.app(scope, receive, send)


def _harden(message: Message) -> None:
    """The headers above, on a response start that does not set them itself."""
    given = {name.lower() for name, _ in message.get("headers", ())}
    extra = [(k, v) for k, v in _HEADERS if k not in given]
    message["headers"] = [*message.get("headers", ()), *extra]
