"""Host and Origin: only the names this instance is served under answer (a DNS-rebinding page
sends its own name), only the page's own origin may call it (no cross-site request, no CORS
echo), and a redirect never leaves the site.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

LOOPBACK_HOST_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")


def split_host(value: str | None) -> tuple[str, int | None] | None:
    """(name, port) of a Host header value ("name", "name:port", "[v6]:port"), lower-cased,
    without a trailing dot; None when it is not a well-formed host."""
    if not value:
        return None
    value = value.strip()
    port_text = ""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1 :]
        try:
            name = str(ipaddress.IPv6Address(name))
        except ValueError:
            return None
        if rest:
            if not rest.startswith(":"):
                return None
            port_text = rest[1:]
    else:
        name, sep, port_text = value.partition(":")
        if sep and not port_text:
            return None
        name = name.lower().rstrip(".")
        if not _HOST_NAME.match(name):
            return None
    port = None
    if port_text:
        if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and 0 < int(port_text) <= 65535):
            return None
        port = int(port_text)
    return name, port


def normalize_host_name(value: str) -> str | None:
    """A bare host name or address as given to --host / --allowed-host, normalized; None when
    it is not one (a port, a scheme, a path or a wildcard is not a name)."""
    value = value.strip()
    try:
        return str(ipaddress.IPv6Address(value.strip("[]"))) if ":" in value else _bare_name(value)
    except ValueError:
        return None


def _bare_name(value: str) -> str | None:
    parsed = split_host(value)
    if parsed is None or parsed[1] is not None:
        return None
    return parsed[0]


def is_wildcard_bind(bind: str) -> bool:
    return bind.strip("[]") in WILDCARD_BINDS


def allowed_host_names(bind: str, extra: Iterable[str] = (), own_addresses: Iterable[str] = ()) -> frozenset[str]:
    """The Host names this instance answers to.

    Always the loopback names (Gradio's launch() calls itself as localhost) and the names the
    user listed. A named bind adds that name. Only a wildcard bind (0.0.0.0, ::) adds the
    machine's own addresses and names, which `own_addresses` lists. A DNS-rebinding page
    always sends its own name, which is in none of these.
    """
    names = set(LOOPBACK_HOST_NAMES)
    for value in extra:
        name = normalize_host_name(value)
        if name:
            names.add(name)
    if is_wildcard_bind(bind):
        for value in own_addresses:
            name = normalize_host_name(value.split("%", 1)[0])  # fe80::1%eth0: the zone is no part of a Host
            if name:
                names.add(name)
    else:
        name = normalize_host_name(bind)
        if name:
            names.add(name)
    return frozenset(names)


def host_allowed(host_header: str | None, names: frozenset[str]) -> bool:
    """Whether a request's Host header names this instance. Any port is accepted: a rebinding
    page cannot choose the name its browser sends, and an SSH tunnel may well change the port."""
    parsed = split_host(host_header)
    return parsed is not None and parsed[0] in names


def origin_allowed(origin: str | None, host_header: str | None, listed_names: frozenset[str] = frozenset()) -> bool:
    """Whether a request's Origin is this page's own (or a name the user listed, for a proxy that
    rewrites Host). No Origin (curl, a same-origin GET) is allowed; "null" never is."""
    if origin is None:
        return True
    try:
        parts = urlsplit(origin.strip())
        origin_name, origin_port = parts.hostname, parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not origin_name or parts.path not in ("", "/") or parts.query or parts.username:
        return False
    origin_name = origin_name.rstrip(".")
    if ":" in origin_name:
        try:
            origin_name = str(ipaddress.IPv6Address(origin_name))
        except ValueError:
            return False
    origin_port = origin_port or (443 if parts.scheme == "https" else 80)
    host = split_host(host_header)
    if host is not None:
        host_name, host_port = host
        if origin_name == host_name and (origin_port == host_port if host_port is not None else origin_port in (80, 443)):
            return True
    return origin_name in listed_names


def same_site_location(location: str, host_header: str | None, listed_names: frozenset[str] = frozenset()) -> bool:
    """Whether a redirect's Location stays on this site: relative, absolute to this Host, or to a
    name the user listed (Gradio builds its login redirects from a proxy's X-Forwarded-Host)."""
    location = location.strip()
    if any(ord(c) < 0x20 for c in location):
        return False
    location = location.replace("\\", "/")  # browsers read /\evil.example as //evil.example
    try:
        parts = urlsplit(location)
    except ValueError:
        return False
    if not parts.scheme and not parts.netloc and not location.startswith("//"):
        return True
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    target, here = split_host(parts.netloc), split_host(host_header)
    if target is None:
        return False
    return target == here or target[0] in listed_names
