"""The web server's edge: every request passes here before Gradio sees any of it.

Gradio's own checks stop at its routes; what a hostile client or a hostile web page can do
before those routes run (or with the answers they give) is decided here:

- Host: only the names this instance is served under (a DNS-rebinding page sends its own
  name), Origin: only the page's own origin (no cross-site request, no CORS echo).
- Login: on an instance with a login, nothing but the login page and what it loads answers
  an anonymous client; wrong passwords from one client address earn a growing wait (429).
- Bodies: a Content-Length over the cap is refused before a byte is read; a chunked body
  is counted while it streams and cut at the cap. Uploads are capped in number and size.
- Answers: a 5xx carries a short text (never a traceback); a redirect never leaves the site;
  Gradio's proxy route and its file route given a URL answer 404.

The decisions are plain functions and small classes (unit-tested); `Guard` is the ASGI
wrapper that applies them. `Guard.lifespan` is handed to `launch(app_kwargs=...)`: Gradio's
FastAPI app runs it before uvicorn accepts a connection, and it wraps the app's whole
middleware stack, so the guard sits outside Gradio's CORS and error middlewares too.
"""

from __future__ import annotations

import ipaddress
import math
import re
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, MutableSet
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

LOOPBACK_HOST_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})

MIB = 1024 * 1024
# The page's JSON calls (a pasted YAML is at most 256 kB, JSON-escaped a few times that).
BODY_CAP = 4 * MIB
# One file of at most 1 MiB plus the multipart framing; serve raises it with --max-upload-mb
# (upload_body_cap): Gradio's own max_file_size is the per-file limit.
UPLOAD_BODY_CAP = 2 * MIB


def upload_body_cap(max_file_bytes: int) -> int:
    """The largest upload body for files of at most `max_file_bytes`: the file plus 1 MiB of
    multipart framing (headers, boundary)."""
    return max(UPLOAD_BODY_CAP, max_file_bytes + MIB)
UPLOAD_PATH = "/gradio_api/upload"
LOGIN_PATHS = frozenset({"/login", "/login/"})

# What Gradio 5.50's login page loads before anyone has logged in (traced in Chromium): the
# page itself, its script/style bundles, the theme and the login form's POST. Fonts and the
# favicon are Gradio's bundled static files.
ANONYMOUS_GET_PATHS = frozenset({"/", "/theme.css", "/gradio_api/theme.css", "/favicon.ico"})
ANONYMOUS_GET_PREFIXES = ("/assets/", "/static/")
# Gradio's launch() calls this on itself, without a login, before the page can be used.
STARTUP_PATH = "/gradio_api/startup-events"

_HOST_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")
_URL_IN_FILE_ROUTE = re.compile(r"/file[=/]+[a-z][a-z0-9+.-]*:")


# --- Host and Origin ---------------------------------------------------------------------------


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


# --- Paths -------------------------------------------------------------------------------------


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


# --- Login back-off ----------------------------------------------------------------------------


def client_key(address: str | None) -> str:
    """The back-off table's key for a client address: an IPv6 client is its /64 (one host
    commonly owns a whole /64, and would otherwise get a fresh key per address)."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


@dataclass
class _Attempts:
    failures: int = 0
    blocked_until: float = 0.0
    last: float = 0.0


class LoginBackoff:
    """Per-client login attempts. Every attempt counts as a failure until it succeeds (so a
    burst sent at once is counted before any answer); from the `free_attempts`-th failure on,
    the client waits `first_delay_s`, doubling each time up to `max_delay_s`, and any attempt
    in that time (the right password included) is refused. A success forgets the client; so
    does an hour without attempts. At most `max_clients` are remembered (least recent first
    out, a client still waiting kept over one that is not)."""

    def __init__(
        self,
        free_attempts: int = 5,
        first_delay_s: float = 2.0,
        max_delay_s: float = 900.0,
        forget_after_s: float = 3600.0,
        max_clients: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.free_attempts = free_attempts
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.forget_after_s = forget_after_s
        self.max_clients = max_clients
        self.clock = clock
        self._clients: OrderedDict[str, _Attempts] = OrderedDict()

    def __len__(self) -> int:
        return len(self._clients)

    def delay_after(self, failures: int) -> float:
        if failures < self.free_attempts:
            return 0.0
        return min(self.max_delay_s, self.first_delay_s * 2 ** min(failures - self.free_attempts, 32))

    def begin(self, client: str) -> float:
        """0 when this attempt may go on (it counts as a failure until `succeeded`), else the
        seconds the client has left to wait."""
        now = self.clock()
        entry = self._clients.get(client)
        if entry is not None and now < entry.blocked_until:
            return entry.blocked_until - now
        if entry is None or now - entry.last > self.forget_after_s:
            entry = self._clients[client] = _Attempts()
        self._clients.move_to_end(client)
        entry.last = now
        entry.failures += 1
        delay = self.delay_after(entry.failures)
        if delay:
            entry.blocked_until = now + delay
        self._trim(now)
        return 0.0

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)

    def _trim(self, now: float) -> None:
        while len(self._clients) > self.max_clients:
            victim = next((key for key, entry in self._clients.items() if entry.blocked_until <= now), None)
            if victim is None:
                self._clients.popitem(last=False)
            else:
                del self._clients[victim]


# --- Upload quota ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Refusal:
    status: int
    text: str
    retry_after_s: float | None = None

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after_s is None:
            return []
        return [(b"retry-after", str(max(1, math.ceil(self.retry_after_s))).encode())]


def upload_refusal(held: list[tuple[float, int]], now: float, max_files: int, max_bytes: int, max_age_s: float) -> Refusal | None:
    """Whether one more upload may come, given the (mtime, size) of the uploads still held
    (those older than `max_age_s` already deleted)."""
    if len(held) >= max_files or sum(size for _, size in held) >= max_bytes:
        oldest = min((mtime for mtime, _ in held), default=now)
        wait = max(1.0, oldest + max_age_s - now)
        return Refusal(429, f"Too many uploads are held ({len(held)} files); try again in {math.ceil(wait / 60)} min.\n", wait)
    return None


class UploadQuota:
    """The uploads one app holds: Gradio's set of uploaded files (what it moved into its cache)
    plus the files in the upload staging folder (bodies being received, or left behind by a
    refused upload). An upload older than `max_age_s` has been read long ago (the page reads an
    upload as it arrives) and is deleted before counting. Leftovers in the staging folder are
    deleted whenever no upload is in flight."""

    def __init__(
        self,
        uploaded: MutableSet[str] | None = None,
        staging: Path | None = None,
        max_files: int = 64,
        max_bytes: int = 32 * MIB,
        max_age_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ):
        self.uploaded = uploaded if uploaded is not None else set()
        self.staging = staging
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self.in_flight = 0

    def _staging_files(self) -> list[Path]:
        if self.staging is None:
            return []
        try:
            return [p for p in self.staging.iterdir() if p.is_file() and not p.is_symlink() and p.name.startswith("tmp")]
        except OSError:
            return []

    def held(self) -> list[tuple[float, int]]:
        now = self.clock()
        held = []
        for name in list(self.uploaded):
            try:
                info = Path(name).lstat()
            except OSError:
                self.uploaded.discard(name)
                continue
            if now - info.st_mtime > self.max_age_s:
                Path(name).unlink(missing_ok=True)
                self.uploaded.discard(name)
                continue
            held.append((info.st_mtime, info.st_size))
        for path in self._staging_files():
            try:
                info = path.stat()
            except OSError:
                continue
            held.append((info.st_mtime, info.st_size))
        return held

    def refusal(self) -> Refusal | None:
        return upload_refusal(self.held(), self.clock(), self.max_files, self.max_bytes, self.max_age_s)

    def begin(self) -> None:
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            # Every body received has been moved into the cache or refused: what is left in
            # staging is a refused upload's body.
            for path in self._staging_files():
                path.unlink(missing_ok=True)


# --- The ASGI wrapper --------------------------------------------------------------------------


@dataclass
class EdgePolicy:
    host_names: frozenset[str]
    listed_names: frozenset[str] = frozenset()  # --allowed-host: also accepted as an Origin
    login_required: bool = False
    body_cap: int = BODY_CAP
    upload_body_cap: int = UPLOAD_BODY_CAP


def _header(scope: Scope, name: bytes) -> str | None:
    """The one value of a header; None when absent. Several values read as a bad request (""),
    which no check accepts."""
    values = [value for key, value in scope.get("headers", ()) if key.lower() == name]
    if not values:
        return None
    if len(values) > 1:
        return ""
    return values[0].decode("latin-1")


def _client_address(scope: Scope) -> str | None:
    client = scope.get("client")
    return client[0] if client else None


class _Exchange:
    """One HTTP request/response pair as the guard sees it: it filters the app's answer (a 5xx
    or a redirect off the site is replaced) and lets the guard answer instead of the app."""

    def __init__(self, send: Send, host_header: str | None, listed_names: frozenset[str]):
        self._send = send
        self.host_header = host_header
        self.listed_names = listed_names
        self.started = False  # a response start went out
        self.done = False  # the guard answered itself: whatever the app sends now is dropped
        self.status: int | None = None

    async def send(self, message: Message) -> None:
        if self.done:
            return
        kind = message["type"]
        if kind == "http.response.start":
            status = int(message["status"])
            if status >= 500:
                await self.answer(Refusal(status if status in (502, 503, 504) else 500, "Internal server error.\n"))
                return
            if 300 <= status < 400:
                location = next((v.decode("latin-1") for k, v in message.get("headers", ()) if k.lower() == b"location"), None)
                if location is not None and not same_site_location(location, self.host_header, self.listed_names):
                    await self.answer(Refusal(403, "Refused: a redirect to another site.\n"))
                    return
            self.status = status
            self.started = True
        await self._send(message)

    async def answer(self, refusal: Refusal) -> bool:
        """Sends `refusal` as the whole response, unless one is already under way."""
        if self.started or self.done:
            return False
        self.started = self.done = True
        self.status = refusal.status
        body = refusal.text.encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()), (b"connection", b"close"), *refusal.headers()]
        await self._send({"type": "http.response.start", "status": refusal.status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})
        return True


class Guard:
    """ASGI wrapper around Gradio's app. Built before launch() with the policy; installed by
    `lifespan` (see the module's docstring); `session_user` tells who a request's cookie
    logs in (None: nobody)."""

    def __init__(
        self,
        policy: EdgePolicy,
        backoff: LoginBackoff | None = None,
        uploads: UploadQuota | None = None,
        log: Callable[[str], None] | None = None,
        own_routes: Callable[[Any], Any] | None = None,
    ):
        self.policy = policy
        # RocBoard's own routes (ui/live.py), put in front of Gradio's app and behind every
        # check made here: given Gradio's app, returns the app that answers first.
        self.own_routes = own_routes
        self.backoff = backoff or LoginBackoff()
        self.uploads = uploads or UploadQuota()
        self.log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        self.inner: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None
        self.session_user: Callable[[Scope], str | None] | None = None
        self.launching = True  # until launch() returns: its own anonymous startup call is let in

    @property
    def installed(self) -> bool:
        return self.inner is not None

    def lifespan(self) -> Callable[[Any], Any]:
        """For `launch(app_kwargs={"lifespan": ...})`."""

        @asynccontextmanager
        async def _install(app: Any):
            self.install(app)
            yield

        return _install

    def install(self, app: Any) -> None:
        """Wraps the app's whole middleware stack (Gradio's CORS and error handling included)."""
        stack = getattr(app, "middleware_stack", None) or app.build_middleware_stack()
        self.inner = self.own_routes(stack) if self.own_routes is not None else stack
        app.middleware_stack = self
        self.session_user = gradio_session_user(app)

    # -- decisions --------------------------------------------------------------------------

    def refusal(self, scope: Scope) -> Refusal | None:
        """Why a request is refused before it reaches Gradio, or None."""
        host = _header(scope, b"host")
        if not host_allowed(host, self.policy.host_names):
            return Refusal(400, "Bad request: this server does not answer to that Host name (start it with --allowed-host NAME to add one).\n")
        if not origin_allowed(_header(scope, b"origin"), host, self.policy.listed_names):
            return Refusal(403, "Forbidden: a request from another site.\n")
        path = scope.get("path", "")
        if refused_path(path):
            return Refusal(404, "Not found.\n")
        method = scope.get("method", "GET") if scope["type"] == "http" else "GET"
        if self.policy.login_required and not self.logged_in(scope) and not anonymous_allowed(method, path):
            if not (self.launching and path == STARTUP_PATH and is_loopback_client(scope.get("client"))):
                return Refusal(401, "Login required.\n")
        if scope["type"] == "http":
            length = _header(scope, b"content-length")
            if length is not None:
                if not (length.isascii() and length.isdigit()):
                    return Refusal(400, "Bad request: Content-Length.\n")
                if int(length) > self.body_cap(path):
                    return Refusal(413, f"Request body too large (at most {self.body_cap(path) // 1024} KiB).\n")
        return None

    def body_cap(self, path: str) -> int:
        return self.policy.upload_body_cap if path.rstrip("/") == UPLOAD_PATH else self.policy.body_cap

    def logged_in(self, scope: Scope) -> bool:
        if self.session_user is None:
            return False  # not installed on a Gradio app: nobody can be told apart, refuse
        try:
            return self.session_user(scope) is not None
        except Exception:  # noqa: BLE001 - an unreadable cookie logs nobody in
            return False

    # -- the ASGI call ----------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.inner is not None, "Guard.install() was not called"
        if scope["type"] not in ("http", "websocket"):
            await self.inner(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if scope["type"] == "websocket":
            if refusal is not None:
                await send({"type": "websocket.close", "code": 1008})  # before accept: the server answers 403
                return
            await self.inner(scope, receive, send)
            return
        exchange = _Exchange(send, _header(scope, b"host"), self.policy.listed_names)
        if refusal is not None:
            await exchange.answer(refusal)
            return
        path, method = scope.get("path", ""), scope.get("method", "GET")
        if self.policy.login_required and method == "GET" and path == "/" and not self.logged_in(scope):
            await self._login_page(scope, receive, exchange)
        elif self.policy.login_required and method == "POST" and path in LOGIN_PATHS:
            await self._login(scope, receive, exchange)
        elif method == "POST" and path.rstrip("/") == UPLOAD_PATH:
            await self._upload(scope, receive, exchange)
        else:
            await self._forward(scope, receive, exchange)

    async def _login(self, scope: Scope, receive: Receive, exchange: _Exchange) -> None:
        client = client_key(_client_address(scope))
        wait = self.backoff.begin(client)
        if wait > 0:
            await exchange.answer(Refusal(429, f"Too many failed logins: try again in {math.ceil(wait)} s.\n", wait))
            return
        await self._forward(scope, receive, exchange)
        if exchange.status == 200:
            self.backoff.succeeded(client)

    async def _login_page(self, scope: Scope, receive: Receive, exchange: _Exchange) -> None:
        # Uncompressed (no Accept-Encoding passed on), so the page can be edited on its way out.
        scope = {**scope, "headers": [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"accept-encoding"]}
        start: Message = {}
        chunks: list[bytes] = []

        async def edit(message: Message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = without_api_info(b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers", ()) if k.lower() != b"content-length"]
            await exchange.send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
            await exchange.send({"type": "http.response.body", "body": body, "more_body": False})

        await self._forward(scope, receive, exchange, send=edit)

    async def _upload(self, scope: Scope, receive: Receive, exchange: _Exchange) -> None:
        refusal = self.uploads.refusal()
        if refusal is not None:
            await exchange.answer(refusal)
            return
        self.uploads.begin()
        try:
            await self._forward(scope, receive, exchange)
        finally:
            self.uploads.end()

    async def _forward(self, scope: Scope, receive: Receive, exchange: _Exchange, send: Send | None = None) -> None:
        cap = self.body_cap(scope.get("path", ""))
        received = 0
        cut = False

        async def counted_receive() -> Message:
            # A chunked body (no Content-Length) is counted as it arrives and cut at the cap;
            # the app then reads a disconnect and its own answer is dropped.
            nonlocal received, cut
            if cut:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > cap:
                    cut = True
                    await exchange.answer(Refusal(413, f"Request body too large (at most {cap // 1024} KiB).\n"))
                    return {"type": "http.disconnect"}
            return message

        try:
            await self.inner(scope, counted_receive, send or exchange.send)
        except Exception:  # noqa: BLE001 - the client gets a short 500; the log keeps the trace
            if not cut:
                self.log("error: a request failed inside the app:\n" + traceback.format_exc().rstrip())
            await exchange.answer(Refusal(500, "Internal server error.\n"))


def gradio_session_user(app: Any) -> Callable[[Scope], str | None]:
    """Who a request's cookie logs in, read as Gradio 5's /login sets it (a token in
    `access-token[-unsecure]-<cookie_id>`, mapped to a user in `app.tokens`)."""
    from starlette.requests import cookie_parser

    def user(scope: Scope) -> str | None:
        cookies = cookie_parser(_header(scope, b"cookie") or "")
        token = cookies.get(f"access-token-{app.cookie_id}") or cookies.get(f"access-token-unsecure-{app.cookie_id}")
        return app.tokens.get(token) if token else None

    return user
