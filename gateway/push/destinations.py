"""Where webhooks may go (pure; the connection's resolution is ``outbound.pinning``'s).

A client's webhook URL is arbitrary by nature, so by default any public ``https``
destination is admitted, and nothing else: a URL whose host is a loopback, private,
link-local, multicast or metadata address (or an IPv6 form carrying one, see
``outbound.addresses``), or ``localhost``, is refused when the config is set; a name is
resolved when a delivery connects, and refused unless every address it resolves to is
public — the connection then goes to one of those addresses, so the name is not resolved
again (DNS rebinding).

``GATEWAY_PUSH_ALLOWLIST`` (``host[:port]`` patterns, as ``GATEWAY_OUTBOUND_ALLOWLIST``'s)
admits destinations the default refuses — a receiver on loopback in development, plain
``http``, a private network — without narrowing the default; with
``GATEWAY_PUSH_RESTRICT`` only the list is admitted. A name the list matches exactly goes
wherever it resolves; a ``*.`` pattern's names only to public addresses or ones an
address pattern covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gateway.errors import InvalidParamsError
from gateway.outbound import Allowlist, OutboundRefused, Target, literal
from gateway.outbound.addresses import Address, is_public

__all__ = ["WebhookPolicy"]

SETTING = "GATEWAY_PUSH_ALLOWLIST"


def _loopback_name(host: str) -> bool:
    name = host.rstrip(".")  # a fully qualified spelling is the same name
    return name == "localhost" or name.endswith(".localhost")  # RFC 6761


class WebhookPolicy:
    """The guard of the webhook client (``outbound.guarded_client``), and of configs as
    they are set."""

    def __init__(self, patterns: Iterable[str], *, restrict: bool = False) -> None:
        self._listed = Allowlist(patterns, setting=SETTING)
        self._restrict = restrict

    def check_name(self, url: str) -> None:
        target = Target.of(url)
        if self._listed.by_name(target.host, target.port)[0]:
            return
        where = f"{target.host}:{target.port}"
        if self._restrict:
            raise OutboundRefused(f"{where} is not in {SETTING}")
        if target.scheme != "https":
            raise OutboundRefused(f"an http webhook must be in {SETTING}; use https")
        address = literal(target.host)
        if (address is not None and not is_public(address)) or _loopback_name(target.host):
            raise OutboundRefused(f"{where} is not a public address")

    def check_addresses(self, host: str, port: int, addresses: Sequence[Address]) -> None:
        self._listed.check_addresses(host, port, addresses)

    def validate(self, url: str, field: str) -> None:
        """A config as it is set: a URL refused is a 400 naming the field."""
        try:
            self.check_name(url)
        except OutboundRefused as exc:
            raise InvalidParamsError(
                "The webhook URL is not allowed",
                data={"errors": [{"field": field, "reason": str(exc)}]},
            ) from exc
