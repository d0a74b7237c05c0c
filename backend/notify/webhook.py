"""The webhook: one URL, a JSON POST per event, in the shape its receiver reads.

Shapes (chosen by the URL's host, or `--webhook-kind`):
- "json" (any other host): RocBoard's own object, every field (`json_payload`).
- "slack" (hooks.slack.com): an incoming webhook takes `{"text": "..."}`, e.g.
  `curl -X POST -H 'Content-type: application/json' -d '{"text":"Hello, World!"}'
  https://hooks.slack.com/services/T1234567/AAAAAAAA/ZZZZZZ`
  (https://docs.slack.dev/tools/java-slack-sdk/guides/incoming-webhooks).
- "feishu" (open.feishu.cn, open.larksuite.com): a custom bot takes
  `{"msg_type": "text", "content": {"text": "..."}}` at https://open.feishu.cn/open-apis/bot/v2/hook/<id>
  (Feishu's custom bot guide, https://open.feishu.cn/document/ukTMukTMukTM/ucTM5YjL3ETO24yNxkjN;
  the same body as https://github.com/Rollingegg/feishu-robot-action sends). Lark is Feishu's
  international service, with the same bot API under open.larksuite.com.
- "dingtalk" (oapi.dingtalk.com): a custom robot takes `{"msgtype": "text", "text": {"content": "..."}}`
  at https://oapi.dingtalk.com/robot/send?access_token=<token>, UTF-8
  (dingtalk.oapi.robot.send, https://developer.alibaba.com/doc2/apiDetail.htm?apiId=37246; at
  most 20 messages a minute per robot).
Feishu and DingTalk answer 200 with an error code in the body ("code" / "errcode" not 0: a
keyword or signature the bot's security settings ask for): logged, not retried.

What is refused before anything is sent (`check_url`): a URL that is not http(s), has no host,
control characters or spaces, or names the app itself (its port on a loopback address, on
the address it binds, or on one of this machine's names). At send time the host is resolved
once more and a loopback answer on the app's port is refused too; redirects are not followed
(a 3xx is a failure): a receiver cannot send the POST back to the app.

The secret part of a URL (a Slack path, a Feishu hook id, a DingTalk access_token: everything
after the host) is never shown or logged: `redact(url)` is `scheme://host[:port]/…`, and an
error is logged by its kind and status, never by its text (urllib's may carry the URL).

Bounded: each try waits at most `timeout_s` (5 s); a 5xx, a 429, a timeout or a refused
connection is tried again after 1 s and 2 s (3 tries); any other 4xx is not. All of it on the
Notifier's one background thread.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from backend.i18n import DEFAULT_LOCALE, Message, localized, render_message
from backend.notify.event import RunEvent
from backend.notify.words import cause_text, event_text

log = logging.getLogger(__name__)

ENV_URL = "ROCBOARD_WEBHOOK_URL"
WEBHOOK_KINDS = ("auto", "json", "slack", "feishu", "dingtalk")
HOST_KINDS = {
    "hooks.slack.com": "slack",
    "open.feishu.cn": "feishu",
    "open.larksuite.com": "feishu",
    "oapi.dingtalk.com": "dingtalk",
}
MAX_URL_CHARS = 2048
TIMEOUT_S = 5.0
TRIES = 3
BACKOFF_S = 1.0  # before the second try; doubled before each next one
MAX_ANSWER_BYTES = 64 * 1024
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})


def redact(url: str) -> str:
    """`scheme://host[:port]/…`: what may be shown or logged of a webhook URL."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = parts.port
    except ValueError:
        return "(a URL that could not be read)"
    if ":" in host:
        host = f"[{host}]"
    scheme = parts.scheme if parts.scheme in ("http", "https") else "?"
    return f"{scheme}://{host}{f':{port}' if port else ''}/…"


def kind_for(url: str, kind: str = "auto") -> str:
    """The payload shape: `kind` when given, else by the URL's host ("json" for any other)."""
    if kind != "auto":
        return kind
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    return HOST_KINDS.get(host, "json")


def _is_loopback_or_any(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host in LOOPBACK_NAMES or host.endswith(".localhost")
    return address.is_loopback or address.is_unspecified


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def check_url(url: str, kind: str = "auto", app_port: int | None = None, own_hosts: Iterable[str] = ()) -> Message | None:
    """Why `url` cannot be the webhook (a message id; its URL redacted), or None. `app_port` and
    `own_hosts` (the address the app binds, this machine's names and addresses): the app itself."""
    if kind not in WEBHOOK_KINDS:
        return Message("notify.webhook.kind", kind=kind[:40], kinds=", ".join(WEBHOOK_KINDS))
    if len(url) > MAX_URL_CHARS or any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return Message("notify.webhook.bad_url", url=redact(url), limit=MAX_URL_CHARS)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return Message("notify.webhook.bad_url", url=redact(url), limit=MAX_URL_CHARS)
    if parts.scheme not in ("http", "https"):
        return Message("notify.webhook.not_http", url=redact(url))
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        return Message("notify.webhook.no_host", url=redact(url))
    port = port or _default_port(parts.scheme)
    if app_port is not None and port == app_port:
        own = {name.lower().strip("[]").rstrip(".") for name in own_hosts if name}
        if _is_loopback_or_any(host) or host in own:
            return Message("notify.webhook.self", url=redact(url), port=app_port)
    return None


@dataclass(frozen=True)
class WebhookSettings:
    """A checked webhook (see `check_url`): where, which shape, in which language, how long."""

    url: str = field(repr=False)  # the secret: never in a repr, a log or the page
    kind: str = "json"
    locale: str = DEFAULT_LOCALE
    timeout_s: float = TIMEOUT_S
    tries: int = TRIES
    backoff_s: float = BACKOFF_S
    app_port: int | None = None

    @property
    def redacted(self) -> str:
        return redact(self.url)


def webhook_settings(url: str, kind: str = "auto", locale: str = DEFAULT_LOCALE, app_port: int | None = None, own_hosts: Iterable[str] = (), **bounds: Any) -> WebhookSettings | Message:
    """The settings for `url`, or why it is refused (a Message)."""
    refusal = check_url(url, kind, app_port, own_hosts)
    if refusal is not None:
        return refusal
    return WebhookSettings(url=url, kind=kind_for(url, kind), locale=locale, app_port=app_port, **bounds)


# --- payloads ------------------------------------------------------------------------------------


def _plain(value: Any, locale: str) -> Any:
    """A value as JSON holds it: numbers, text, a message rendered in `locale`."""
    if isinstance(value, bool | int | float) or value is None:
        return value if not isinstance(value, float) or value == value and abs(value) != float("inf") else None
    if isinstance(value, str) and callable(getattr(value, "text", None)):
        return localized(value, locale)
    if isinstance(value, list | tuple):
        return [_plain(v, locale) for v in value][:100]
    return str(value)[:500]


def json_payload(event: RunEvent, locale: str) -> dict[str, Any]:
    """RocBoard's own shape: every field of the event, its cause and words in `locale`."""
    return {
        "source": "rocboard",
        "event": event.kind,
        "run": event.run_id,
        "run_name": event.run_name,
        "state": event.state,
        "sweep": event.sweep_id,
        "cause": {
            "id": event.cause_id,
            "params": {str(k): _plain(v, locale) for k, v in event.cause_params.items()},
            "text": cause_text(event, locale),
        },
        "figures": {str(k): _plain(v, locale) for k, v in event.figures.items()},
        "text": event_text(event, locale),
        "lang": locale,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event.at)),
    }


def payload(kind: str, event: RunEvent, locale: str) -> dict[str, Any]:
    """The body for a receiver of `kind` (see the module's docstring for each one's format)."""
    if kind == "slack":
        # Slack reads &, < and > as its own markup (links, mentions): escaped as its docs say.
        return {"text": event_text(event, locale).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")}
    if kind == "feishu":
        return {"msg_type": "text", "content": {"text": event_text(event, locale)}}
    if kind == "dingtalk":
        return {"msgtype": "text", "text": {"content": event_text(event, locale)}}
    return json_payload(event, locale)


# --- sending -------------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        return None  # a 3xx ends as an HTTPError: a redirect could name the app itself


_OPENER = urllib.request.build_opener(_NoRedirect)


def _resolves_to_app(settings: WebhookSettings) -> bool:
    """The URL's host, resolved now, is a loopback address and the port is the app's."""
    parts = urlsplit(settings.url)
    port = parts.port or _default_port(parts.scheme)
    if settings.app_port is None or port != settings.app_port:
        return False
    try:
        answers = socket.getaddrinfo(parts.hostname or "", port, proto=socket.IPPROTO_TCP)
    except OSError:
        return False  # the POST's own connection says why
    return any(_is_loopback_or_any(str(answer[4][0]).split("%")[0]) for answer in answers)


def _post_once(settings: WebhookSettings, body: bytes) -> tuple[int | None, bytes]:
    """(HTTP status, the answer's first bytes); status None: no answer (a timeout, a refusal)."""
    request = urllib.request.Request(settings.url, data=body, method="POST", headers={"Content-Type": "application/json; charset=utf-8", "User-Agent": "RocBoard"})
    try:
        with _OPENER.open(request, timeout=settings.timeout_s) as answer:
            return answer.status, answer.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as error:
        error.close()
        return error.code, b""
    except (OSError, ValueError) as error:  # URLError, a timeout, a refused connection
        log.info("webhook %s: no answer (%s)", settings.redacted, type(getattr(error, "reason", error)).__name__)
        return None, b""


def _body_error(kind: str, answer: bytes) -> Any:
    """Feishu's "code" / DingTalk's "errcode" when not 0 (a 200 that was refused), else None."""
    if kind not in ("feishu", "dingtalk"):
        return None
    try:
        data = json.loads(answer.decode("utf-8", "replace") or "{}")
    except ValueError:
        return None
    code = data.get("code", data.get("StatusCode")) if kind == "feishu" else data.get("errcode")
    return code if isinstance(data, dict) and code not in (None, 0) else None


def deliver(settings: WebhookSettings, event: RunEvent, locale: str | None = None, sleep: Any = time.sleep) -> bool:
    """Posts `event` (up to `settings.tries` times); True once a receiver took it."""
    locale = locale or settings.locale
    body = json.dumps(payload(settings.kind, event, locale), ensure_ascii=False, allow_nan=False).encode("utf-8")
    if _resolves_to_app(settings):
        log.warning("webhook %s: refused, its host is this machine and its port the app's", settings.redacted)
        return False
    for attempt in range(settings.tries):
        if attempt:
            sleep(settings.backoff_s * 2 ** (attempt - 1))
        status, answer = _post_once(settings, body)
        if status is not None and 200 <= status < 300:
            code = _body_error(settings.kind, answer)
            if code is not None:
                log.warning("webhook %s: the receiver answered with error code %s", settings.redacted, str(code)[:40])
                return False
            return True
        if status is not None and 400 <= status < 500 and status != 429:
            log.warning("webhook %s: refused with HTTP %d; not tried again", settings.redacted, status)
            return False
        log.info("webhook %s: try %d of %d failed (%s)", settings.redacted, attempt + 1, settings.tries, status if status is not None else "no answer")
    log.warning("webhook %s: the %s of run %s was not posted after %d tries", settings.redacted, event.kind, event.run_id, settings.tries)
    return False


def refusal_text(refusal: Message, locale: str) -> str:
    return render_message(refusal.key, refusal.params, locale)


__all__ = ["ENV_URL", "WEBHOOK_KINDS", "WebhookSettings", "check_url", "deliver", "json_payload", "kind_for", "payload", "redact", "webhook_settings"]
