"""Which host names count as loopback: one rule for ``serve``'s bind and MCP server URLs.

Both decide whether plain, unauthenticated traffic may stay on this machine,
so the rule is strict and fails closed: exactly ``localhost`` and loopback IP
literals. Not: other spellings (``LOCALHOST``, ``localhost.``), other names
that happen to resolve to loopback (``ip6-localhost``, ``x.localhost``),
IPv4-mapped IPv6 (``::ffff:127.0.0.1``, which Python versions disagree on),
half-bracketed or bracketed IPv4 literals. An IPv6 literal may be bracketed
(``[::1]``, as in a URL or a bind address).
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback"]


def is_loopback(host: str | None) -> bool:
    """True for exactly ``localhost`` and loopback IP literals; anything else is not."""
    if not host:
        return False
    if host == "localhost":
        return True
    bracketed = host.startswith("[") and host.endswith("]")
    try:
        address = ipaddress.ip_address(host[1:-1] if bracketed else host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        return address.ipv4_mapped is None and address.is_loopback
    return not bracketed and address.is_loopback
