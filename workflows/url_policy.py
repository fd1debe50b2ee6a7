"""Pure checks on solver URLs, shared by the API (at submit) and workers (per hop).

No I/O here: callers resolve host names themselves and pass the addresses in.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit


def parse_schemes(raw: str) -> frozenset[str]:
    """`"https, http"` → {"https", "http"}."""
    return frozenset(part.strip().lower() for part in raw.split(",") if part.strip())


def url_shape_problem(url: str, schemes: frozenset[str]) -> str | None:
    """Why `url` is not acceptable on its face, or None."""
    try:
        parts = urlsplit(url)
    except ValueError as err:
        return f"solver_url is not a URL: {err}"
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        allowed = ", ".join(sorted(schemes)) or "none"
        return f"solver_url scheme {scheme or '(none)'!r} is not allowed (allowed: {allowed})"
    if scheme == "file":
        return None if parts.path else "solver_url file URL has no path"
    if not parts.hostname:
        return "solver_url has no host"
    if parts.username or parts.password:
        return "solver_url must not carry credentials"
    return None


def literal_ip(host: str) -> str | None:
    """`host` itself when it is an IP literal."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def private_address(addresses: Iterable[str]) -> str | None:
    """The first address that is loopback, private, link-local or otherwise not public."""
    for raw in addresses:
        addr = ipaddress.ip_address(raw.split("%", 1)[0])
        if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
            addr = addr.ipv4_mapped
        if not addr.is_global or addr.is_multicast:
            return str(addr)
    return None
