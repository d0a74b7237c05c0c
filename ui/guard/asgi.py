"""The ASGI wrapper: `Guard` applies the edge's decisions (ui/guard/origin.py, paths.py,
backoff.py, quota.py) to every request before Gradio sees any of it, caps the bodies while
they stream, and rewrites the answers (a 5xx without a traceback, no redirect off the site).
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from ui.guard.backoff import LoginBackoff, client_key
from ui.guard.origin import host_allowed, origin_allowed, same_site_location
from ui.guard.paths import LOGIN_PATHS, UPLOAD_PATH, anonymous_allowed, is_loopback_client, refused_path, without_api_info
from ui.guard.quota import MIB, UPLOAD_BODY_CAP, Refusal, UploadQuota

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# The page's JSON calls (a pasted YAML is at most 256 kB, JSON-escaped a few times that).
BODY_CAP = 4 * MIB
# Gradio's launch() calls this on itself, without a login, before the page can be used.
STARTUP_PATH = "/gradio_api/startup-events"
GRADIO_STARTUP_AGENT = "python-httpx/"  # the user agent of launch()'s own startup call (gradio/blocks.py)


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
        # `is None`, not `or`: an empty LoginBackoff is falsy (its __len__), and a given one must be kept.
        self.backoff = backoff if backoff is not None else LoginBackoff()
        self.uploads = uploads if uploads is not None else UploadQuota()
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
            if not (self.launching and path == STARTUP_PATH and is_loopback_client(scope.get("client")) and (_header(scope, b"user-agent") or "").startswith(GRADIO_STARTUP_AGENT)):
                return Refusal(401, "Login required.\n")
            # Gradio's own call (launch() asks it once, with httpx, once the server listens): the
            # window closes with it, so a client racing the launch is not let in before or after.
            self.launching = False
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
        inner = self.inner
        assert inner is not None, "Guard.install() was not called"  # __call__ asked first
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
            await inner(scope, counted_receive, send or exchange.send)
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
