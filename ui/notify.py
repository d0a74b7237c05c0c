"""The browser's word when a run ends: a notification in an open tab (the Notification API).

The events come from the backend (`RocBoard.notices`: backend/notify); this module only
answers the tab's question and holds the small script that asks it. The script:
- asks the browser's permission once, on the page's first click (browsers ignore a request
  made without one), and never again once answered (remembered in localStorage);
- while permission is granted and the run the panel shows trains (`#live-state`, the
  watcher's element, looked at each second), and for a minute after, asks
  `rocboard/notices?after=N&lang=L` every 5 s (its first question, the cursor, at once), and shows each new event as a notification (title and body are plain text: the
  Notification API renders no markup). A tab whose run does not train asks nothing.

The route sits behind the Guard (ui/guard/), like the watcher's: Host, Origin and the login
are checked first. GET and HEAD only; a query of another shape is a 400.
"""

from __future__ import annotations

import json
import re
from typing import Any

from backend.i18n import LOCALES, pick_locale
from backend.service import RocBoard
from ui.live import ASGIApp, Receive, Scope, Send, _answer, _header

NOTICES_PATH = "/rocboard/notices"
POLL_MS = 5000
AFTER_END_MS = 60_000
QUERY = re.compile(r"(?:after=(?P<after>[0-9]{0,12}))?(?:&?lang=(?P<lang>[A-Za-z-]{0,16}))?")
BAD_QUERY = b"Bad query: the page asks with after and lang.\n"


def parse_notices_query(query: bytes) -> tuple[int | None, str] | None:
    """(the tab's cursor, its language) of `after=N&lang=L`; None for any other shape."""
    try:
        text = query.decode("ascii")
    except UnicodeDecodeError:
        return None
    match = QUERY.fullmatch(text)
    if match is None:
        return None
    after = match.group("after")
    return (int(after) if after else None), match.group("lang") or ""


class NoticeRoutes:
    """ASGI app in front of the others: answers NOTICES_PATH, hands the rest on."""

    def __init__(self, inner: ASGIApp, board: RocBoard):
        self.inner = inner
        self.board = board

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("path") != NOTICES_PATH:
            await self.inner(scope, receive, send)
            return
        if scope.get("method") not in ("GET", "HEAD"):
            await _answer(send, 405, b"Method not allowed.\n", "text/plain; charset=utf-8", extra=[(b"allow", b"GET, HEAD")])
            return
        head = scope.get("method") == "HEAD"
        parsed = parse_notices_query(scope.get("query_string", b"")[:200])
        if parsed is None or len(scope.get("query_string", b"")) > 200:
            await _answer(send, 400, b"" if head else BAD_QUERY, "text/plain; charset=utf-8", length=len(BAD_QUERY))
            return
        after, locale = parsed
        if locale not in LOCALES:
            locale = pick_locale(_header(scope, b"accept-language"))
        answer: dict[str, Any] = self.board.notices(after, locale)
        body = json.dumps(answer, separators=(",", ":"), ensure_ascii=True).encode()
        await _answer(send, 200, b"" if head else body, "application/json", length=len(body), extra=[(b"cache-control", b"no-store")])


NOTIFY_JS = """
(() => {
  if (window.rocboardNotify || !("Notification" in window)) return;
  const s = window.rocboardNotifySettings;
  const ASKED = "rocboard-notify-asked";
  let cursor = null, activeUntil = 0, asking = false;
  window.rocboardNotify = { shown: [] };
  document.addEventListener("click", () => {
    if (Notification.permission !== "default" || localStorage.getItem(ASKED)) return;
    localStorage.setItem(ASKED, "1");
    Notification.requestPermission();
  }, { capture: true });
  function live() {
    const el = document.querySelector("#live-state [data-live]");
    return el ? { active: el.dataset.active === "1", lang: el.dataset.lang || "en" } : null;
  }
  let lastAsked = 0;
  async function tick() {
    const state = live();
    if (!state || Notification.permission !== "granted" || asking) return;
    const now = Date.now();
    if (state.active) activeUntil = now + s.after_end_ms;
    if (now > activeUntil) { cursor = null; return; }
    if (cursor !== null && now - lastAsked < s.poll_ms) return;
    asking = true;
    lastAsked = now;
    try {
      const url = new URL(s.path, window.location.href);
      url.search = new URLSearchParams(cursor === null ? { lang: state.lang } : { after: String(cursor), lang: state.lang }).toString();
      const response = await fetch(url.href, { cache: "no-store", credentials: "same-origin" });
      if (!response.ok) return;
      const answer = await response.json();
      for (const e of answer.events || []) {
        new Notification(String(e.title), { body: String(e.body), tag: "rocboard-" + e.seq });
        window.rocboardNotify.shown.push(e); // after: what a test reads was shown for real
      }
      cursor = answer.seq;
    } catch (error) {
      // the server restarting: the next tick asks again
    } finally {
      asking = false;
    }
  }
  // A look at #live-state each second (no request); a question every poll_ms while it trains.
  setInterval(tick, 1000);
})();
"""


def notify_script() -> str:
    """The snippet for the page's <head>. No user text is in it."""
    settings = json.dumps({"path": NOTICES_PATH.lstrip("/"), "poll_ms": POLL_MS, "after_end_ms": AFTER_END_MS})
    return f"<script>window.rocboardNotifySettings = {settings};\n{NOTIFY_JS}</script>"


__all__ = ["NOTICES_PATH", "NoticeRoutes", "notify_script", "parse_notices_query"]
