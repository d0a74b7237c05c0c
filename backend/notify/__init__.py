"""Word when a run ends (issue 30 §3): an event per run end, NaN stop, stall alert and sweep end,
sent to a webhook (backend/notify/webhook.py) and kept for the open tabs' browser notifications.

- `RunEvent`: what happened, to which run, its state, the cause (a message id and its values,
  rendered in the reader's language), its figures (step, loss, ...) and the sweep it belongs to.
- `Notifier.send(event)`: never blocks. The event is kept in a small ring the page asks
  (`recent`: the Notification API snippet, ui/notify.py) and, when a webhook is set, put on a
  bounded queue that one background thread posts from (bounded timeout, a few retries with
  backoff). A full queue drops the event (logged), it never waits.

Who sends: RunDecisions (backend/service/decisions.py) for a run's end and its stall alert, the
sweeps for a sweep's end. Nothing here imports the service: it is told, it decides nothing
about runs. docs/notify.md.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from typing import Any

from backend.i18n import DEFAULT_LOCALE
from backend.notify.event import KINDS, RunEvent
from backend.notify.webhook import WebhookSettings, deliver
from backend.notify.words import event_body, event_title

log = logging.getLogger(__name__)

QUEUE_SIZE = 100  # events waiting for the webhook; one more is dropped (logged), never waited for
RECENT_SIZE = 200  # events kept for the tabs to ask about
MAX_TITLE_CHARS = 200
MAX_BODY_CHARS = 800


class Notifier:
    """One per app. `webhook` None: events are only kept for the page."""

    def __init__(self, webhook: WebhookSettings | None = None, locale: str = DEFAULT_LOCALE, queue_size: int = QUEUE_SIZE):
        self.webhook = webhook
        self.locale = locale
        self._queue: queue.Queue[RunEvent | None] = queue.Queue(maxsize=queue_size)
        self._recent: deque[tuple[int, RunEvent]] = deque(maxlen=RECENT_SIZE)
        self._seq = itertools.count(1)
        self._last = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.delivered = 0  # POSTs answered 2xx (tests and the docs' figures read them)
        self.dropped = 0  # events not posted: the queue was full, or every try failed
        self._full_said = False

    def send(self, event: RunEvent) -> None:
        """Keeps `event` for the page and queues it for the webhook; returns at once."""
        with self._lock:
            self._last = next(self._seq)
            self._recent.append((self._last, event))
            if self.webhook is None:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._post_loop, daemon=True, name="notify-webhook")
                self._thread.start()
        try:
            self._queue.put_nowait(event)
            self._full_said = False
        except queue.Full:
            self.dropped += 1
            if not self._full_said:  # once per time the queue is full, not once per event
                self._full_said = True
                log.warning("webhook %s: %d events wait already; the %s of run %s and those after it are dropped until it moves", self.webhook.redacted, self._queue.maxsize, event.kind, event.run_id)

    def recent(self, after: int | None, locale: str) -> dict[str, Any]:
        """What a tab asks (ui/notify.py): the events after its cursor `after`, in `locale`,
        and the cursor to ask with next. No cursor (a tab that just started asking), or one from
        before a restart of the app: none, only the cursor."""
        with self._lock:
            last = self._last
            events = [] if after is None or after > last else [(seq, event) for seq, event in self._recent if seq > after]
        return {
            "seq": last,
            "events": [
                {"seq": seq, "kind": event.kind, "run": event.run_id, "title": event_title(event, locale)[:MAX_TITLE_CHARS], "body": event_body(event, locale)[:MAX_BODY_CHARS]}
                for seq, event in events
            ],
        }

    def idle(self, timeout_s: float = 10.0) -> bool:
        """Waits until every queued event was posted or given up on (tests, the app's stop)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._queue.unfinished_tasks

    def close(self) -> None:
        """Ends the posting thread once it is idle (what is queued is given its tries)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass  # a daemon thread: it ends with the app

    def _post_loop(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                assert self.webhook is not None
                if deliver(self.webhook, event, self.webhook.locale or self.locale):
                    self.delivered += 1
                else:
                    self.dropped += 1
            except Exception:  # a bug here must not end the posting of later events
                log.exception("webhook %s: posting an event failed", self.webhook.redacted if self.webhook else "")
            finally:
                self._queue.task_done()


__all__ = ["KINDS", "Notifier", "RunEvent", "WebhookSettings"]
