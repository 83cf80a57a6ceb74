"""Which IP addresses are public: reachable on the internet, so a request to one cannot
land in the gateway's own host or network (pure; no I/O).

``ipaddress``'s ``is_global`` is the base, but it misses some addresses that reach a
private one (Python 3.11): an IPv6 address can carry an IPv4 address inside it — NAT64
(``64:ff9b::/96``, and the local-use ``64:ff9b:1::/48``), IPv4-mapped (``::ffff:0:0/96``),
IPv4-translated (``::ffff:0:0:0/96``), IPv4-compatible (``::/96``), 6to4 (``2002::/16``)
and Teredo (``2001::/32``) — and such an address is public only if the IPv4 address it
carries is. Multicast is never a destination.
"""

from __future__ import annotations

import ipaddress

__all__ = ["Address", "embedded_ipv4", "is_public"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries, if it is of a form that carries one."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client's address
    if address in _NAT64 or address in _TRANSLATED or address in _COMPATIBLE:
        return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return None


def is_public(address: Address) -> bool:
    """Whether ``address`` is a public unicast address (and any IPv4 address it carries)."""
    if address.is_multicast or not address.is_global:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        if address in _NAT64_LOCAL:  # where the IPv4 address sits depends on the prefix
            return False
        inner = embedded_ipv4(address)
        if inner is not None:
            return is_public(inner)
    return True
