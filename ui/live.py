"""The watcher's own small routes, and the script that uses them.

Why not a Gradio timer: each tick of one was a Gradio event with the run panel's outputs,
~7 ms of Gradio's work per second even when nothing had changed, and each redraw handed
plotly.js a new figure and a forced resize. Here the page asks `rocboard/live` once a
second while the run it shows trains (not at all otherwise); an unchanged run costs a look
at its files and a ~60-byte answer. A changed run's answer carries its two charts, which the
script draws with `Plotly.react` (plotly diffs them: only what changed is redrawn), and
only then does the script press the hidden `#live-refresh` button, the one Gradio event,
for the rest of the panel (status, progress, buttons).

It pauses while nobody can see the panel: the Train tab not shown (another tab of the page
chosen) or the browser tab in the background (`document.hidden`). A tab left on the Runs tab
with 8 runs live spent most of its CPU, and most of what it cost this process, on the hidden
Train tab's questions, chart redraws and refresh events (BENCHMARKS.md section 12). When the
panel shows again (a tab switch, visibilitychange) the script asks at once and the charts,
the progress bar and the panel catch up. The same script presses the Runs tab's node panel
refresh (`#runs-node-tick`, ui/runs_tab.py) every NODE_TICK_MS on the same rule, in place of a
gr.Timer, which ticks on a tab not chosen too.

plotly.js is plotly's "basic" bundle (scatter, bar, pie: all the charts need), kept in
ui/static/ (plotly.js-basic-dist-min 4.1.1, MIT, the version the plotly package ships): a
browser evaluates it in ~0.25 s where the full bundle (4.8 MB, in the plotly package, the
fallback) takes ~1.1 s on two cores, which was most of a cold page's wait for its first
chart. It is gzipped once, cached by the browser, and fetched as the page opens.

The routes sit behind the Guard (ui/guard/): Host, Origin and the login are checked
before a request gets here. They answer GET and HEAD only, read a bounded query string of
the page's own shape (any other is a 400: `parse_live_query`), and never echo what they
were sent.
"""

from __future__ import annotations

import gzip
import html
import json
import re
import threading
from collections.abc import Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from backend.i18n import LOCALES, pick_locale
from backend.service import RocBoard
from backend.service.live import version_key

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LIVE_PATH = "/rocboard/live"
PLOTLY_PATH = "/rocboard/plotly.min.js"
MAX_QUERY_BYTES = 400
TICK_MS = 1000
NODE_TICK_MS = 3000  # the Runs tab's node panel refreshed while it shows (ui/runs_tab.py, side by side only)
# What ui/live.js sends, each field at most once, and the shape of its value: a run id as the
# run store makes them (or none), a language code, a version (version_key: hex), "1". A query
# of any other shape (another field, a field twice, non-ASCII, a value too long) is a 400.
LIVE_FIELDS: dict[str, re.Pattern[str]] = {
    "run": re.compile(r"[A-Za-z0-9._-]{0,128}"),
    "lang": re.compile(r"[A-Za-z-]{0,16}"),
    "drawn": re.compile(r"[0-9a-f]{0,64}"),
    "first": re.compile(r"1?"),
}
BAD_QUERY = b"Bad query: the page asks with run, lang, drawn or first, each at most once.\n"


def parse_live_query(query: bytes) -> dict[str, str] | None:
    """The fields of a watcher's question (`run=ID&lang=L&drawn=V`, `first=1`), or None when
    the query is not one the page sends (see LIVE_FIELDS). Values are percent-decoded as
    UTF-8; nothing else (no `+` for a space, no `;` between fields) is needed by the page."""
    try:
        text = query.decode("ascii")
    except UnicodeDecodeError:
        return None
    fields: dict[str, str] = {}
    if not text:
        return fields
    for part in text.split("&"):
        name, equals, raw = part.partition("=")
        shape = LIVE_FIELDS.get(name)
        if not equals or shape is None or name in fields:
            return None
        try:
            value = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            return None
        if not shape.fullmatch(value):
            return None
        fields[name] = value
    return fields


def plotly_version() -> str:
    """What the script's URL carries, so that a new bundle is not taken from the cache."""
    try:
        return f"{metadata.version('plotly')}-{BASIC_BUNDLE.stat().st_size if BASIC_BUNDLE.is_file() else 'full'}"
    except metadata.PackageNotFoundError:
        return "0"


BASIC_BUNDLE = Path(__file__).resolve().parent / "static" / "plotly-basic.min.js"


def plotly_bundle() -> Path:
    """The basic bundle when it is there, else the full one of the plotly package."""
    if BASIC_BUNDLE.is_file():
        return BASIC_BUNDLE
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


class PlotlyScript:
    """plotly.js (see plotly_bundle), read and gzipped on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plain: bytes | None = None
        self._gzipped: bytes | None = None

    def bodies(self) -> tuple[bytes, bytes]:
        with self._lock:
            if self._plain is None:
                self._plain = plotly_bundle().read_bytes()
                self._gzipped = gzip.compress(self._plain, 6)
            assert self._gzipped is not None
            return self._plain, self._gzipped


def live_state_html(run_id: str | None, version: tuple | None, active: bool, locale: str, initial: bool = False) -> str:
    """The hidden element the script reads: which run the panel shows, in which version and
    language, and whether it trains (`initial`: the page as built, before its load event
    decided). The run id is escaped like any text put in a page."""
    attributes = {
        **({"data-initial": "1"} if initial else {}),
        "data-live": "1",
        "data-run": run_id or "",
        "data-version": version_key(version),
        "data-active": "1" if active else "0",
        "data-lang": locale,
    }
    return "<div " + " ".join(f'{name}="{html.escape(value, quote=True)}"' for name, value in attributes.items()) + "></div>"


class LiveRoutes:
    """ASGI app in front of Gradio's: answers LIVE_PATH and PLOTLY_PATH, hands the rest on."""

    def __init__(self, inner: ASGIApp, board: RocBoard, plotly_script: PlotlyScript | None = None):
        self.inner = inner
        self.board = board
        self.plotly = plotly_script or PlotlyScript()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope.get("type") == "http" else ""
        if path not in (LIVE_PATH, PLOTLY_PATH):
            await self.inner(scope, receive, send)
            return
        if scope.get("method") not in ("GET", "HEAD"):
            await _answer(send, 405, b"Method not allowed.\n", "text/plain; charset=utf-8", extra=[(b"allow", b"GET, HEAD")])
            return
        head = scope.get("method") == "HEAD"
        if path == PLOTLY_PATH:
            await self._plotly(scope, send, head)
            return
        query = scope.get("query_string", b"")
        if len(query) > MAX_QUERY_BYTES:
            await _answer(send, 414, b"Query too long.\n", "text/plain; charset=utf-8")
            return
        params = parse_live_query(query)
        if params is None:
            await _answer(send, 400, b"" if head else BAD_QUERY, "text/plain; charset=utf-8", length=len(BAD_QUERY))
            return
        run_id = params.get("run", "")
        locale = params.get("lang", "")
        drawn = params.get("drawn", "")
        first = params.get("first", "") == "1"
        if locale not in LOCALES:
            # The page's first question comes before it has picked its language: the
            # browser's, as the page's load event will pick it (a saved choice may differ;
            # the charts are then redrawn once the page says which).
            locale = pick_locale(_header(scope, b"accept-language"))
        import anyio

        # Reads a few bytes of the run's files; off the event loop like Gradio's own handlers.
        answer = await anyio.to_thread.run_sync(self._answer, run_id, locale, drawn, first)
        body = json.dumps(answer, separators=(",", ":"), allow_nan=False).encode()
        await _answer(send, 200, b"" if head else body, "application/json", length=len(body), extra=[(b"cache-control", b"no-store")])

    def _answer(self, run_id: str, locale: str, drawn: str, first: bool) -> dict[str, Any]:
        """RocBoard.live's answer; `first` (a page just opened, before its load event said
        which run it shows): about the run the load event will show, named in the answer,
        so that a cold page draws its charts without waiting for Gradio's first event."""
        if first and not run_id:
            shown = self.board.run_to_show()
            if shown is None:
                return {"version": "", "active": False, "run": "", "lang": locale}
            return {**self.board.live(shown.id, locale, drawn).as_json(), "run": shown.id, "lang": locale}
        return self.board.live(run_id, locale, drawn).as_json()

    async def _plotly(self, scope: Scope, send: Send, head: bool) -> None:
        import anyio

        plain, gzipped = await anyio.to_thread.run_sync(self.plotly.bodies)
        accepts = _header(scope, b"accept-encoding") or ""
        zipped = "gzip" in accepts.lower()
        body = gzipped if zipped else plain
        extra = [(b"cache-control", b"public, max-age=31536000, immutable"), (b"vary", b"accept-encoding")]
        if zipped:
            extra.append((b"content-encoding", b"gzip"))
        await _answer(send, 200, b"" if head else body, "text/javascript; charset=utf-8", length=len(body), extra=extra)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _answer(send: Send, status: int, body: bytes, content_type: str, length: int | None = None, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [
        (b"content-type", content_type.encode()),
        (b"content-length", str(len(body) if length is None else length).encode()),
        (b"x-content-type-options", b"nosniff"),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def live_script() -> str:
    """The page's watcher (and the node panel's refresh, pressed only while the panel shows),
    put in the page's <head>. No user text is in it."""
    source = (Path(__file__).with_name("live.js")).read_text(encoding="utf-8")
    settings = json.dumps({"live": LIVE_PATH.lstrip("/"), "plotly": f"{PLOTLY_PATH.lstrip('/')}?v={plotly_version()}", "tick_ms": TICK_MS, "node_tick_ms": NODE_TICK_MS})
    return f"<script>window.rocboardLiveSettings = {settings};\n{source}</script>"


__all__ = ["LIVE_FIELDS", "LIVE_PATH", "PLOTLY_PATH", "LiveRoutes", "PlotlyScript", "live_script", "live_state_html", "parse_live_query"]
