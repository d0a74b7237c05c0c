"""What a request may reach: the routes refused outright (Gradio's proxy route, its file route
given a URL), what an anonymous client may load on an instance with a login (the login page
and its bundles), and the page's API description kept from an anonymous client.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import unquote

UPLOAD_PATH = "/gradio_api/upload"
LOGIN_PATHS = frozenset({"/login", "/login/"})

# What Gradio 5.50's login page loads before anyone has logged in (traced in Chromium): the
# page itself, its script/style bundles, the theme and the login form's POST. Fonts and the
# favicon are Gradio's bundled static files.
ANONYMOUS_GET_PATHS = frozenset({"/", "/theme.css", "/gradio_api/theme.css", "/favicon.ico"})
ANONYMOUS_GET_PREFIXES = ("/assets/", "/static/")
_URL_IN_FILE_ROUTE = re.compile(r"/file[=/]+[a-z][a-z0-9+.-]*:")


def decoded_path(path: str) -> str:
    """The path with percent-escapes undone until stable (a few rounds at most), lower-cased."""
    for _ in range(4):
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    return path.lower()


def refused_path(path: str) -> bool:
    """Routes that never answer here: Gradio's proxy (this app loads no remote Space), and its
    file routes given a URL (they answer with a redirect to it)."""
    lowered = decoded_path(path)
    return "/proxy=" in lowered or _URL_IN_FILE_ROUTE.search(lowered) is not None


def anonymous_allowed(method: str, path: str) -> bool:
    """What an anonymous client may fetch on an instance with a login: the login page's needs."""
    if path in LOGIN_PATHS:
        return method == "POST"
    if method not in ("GET", "HEAD"):
        return False
    if "/.." in path or "\\" in path:
        return False
    return path in ANONYMOUS_GET_PATHS or path.startswith(ANONYMOUS_GET_PREFIXES)


def is_loopback_client(client: Any) -> bool:
    try:
        return ipaddress.ip_address(client[0]).is_loopback
    except (TypeError, ValueError, IndexError):
        return False


_API_INFO_SCRIPT = re.compile(rb"(window\.gradio_api_info\s*=\s*).*?(;\s*</script>)", re.DOTALL)
EMPTY_API_INFO = b'{"named_endpoints": {}, "unnamed_endpoints": {}}'


def without_api_info(page: bytes) -> bytes:
    """Gradio's page with its embedded API description emptied. Gradio puts the description
    of every endpoint into the page it serves at / (the login page included); an anonymous
    client gets the login form and nothing about the app behind it."""
    return _API_INFO_SCRIPT.sub(lambda m: m.group(1) + EMPTY_API_INFO + m.group(2), page, count=1)
