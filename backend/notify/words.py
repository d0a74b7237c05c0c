"""An event in words, in one language: a title (`notify.title.<kind>`), its figures and its
cause (the event's own message id, rendered in the same language). Plain text: a browser
notification and the chat tools' text messages show it as written (Slack's `&`, `<`, `>` are
escaped by the webhook's payload)."""

from __future__ import annotations

from typing import Any

from backend.i18n import CATALOGUE, DEFAULT_LOCALE, canonical_locale, render_message, translate
from backend.notify.event import RunEvent

MAX_NAME_CHARS = 120


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)[:40]
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def event_title(event: RunEvent, locale: str) -> str:
    name = (event.run_name or event.run_id)[:MAX_NAME_CHARS]
    return translate(f"notify.title.{event.kind}", locale, run=name, sweep=event.sweep_id[:MAX_NAME_CHARS])


def figures_text(event: RunEvent, locale: str) -> str:
    """The figures a reader acts on, those the event has, in a fixed order; "" for none."""
    f = event.figures
    parts: list[str] = []
    if f.get("step") is not None:
        total = f.get("total")
        parts.append(translate("notify.figure.step_of", locale, step=_number(f["step"]), total=_number(total)) if total else translate("notify.figure.step", locale, step=_number(f["step"])))
    for key in ("loss", "eval_loss", "minutes", "runs", "best_run", "best_value"):
        if f.get(key) is not None and f.get(key) != "":
            value = f[key] if key == "best_run" else _number(f[key])
            parts.append(translate(f"notify.figure.{key}", locale, value=str(value)[:MAX_NAME_CHARS]))
    return translate("health.separator", locale).join(parts)


def cause_text(event: RunEvent, locale: str) -> str:
    """The cause's words in `locale`; "" without a cause, or for an id the catalogue lacks."""
    if not event.cause_id:
        return ""
    catalogue = CATALOGUE.get(canonical_locale(locale) or DEFAULT_LOCALE, CATALOGUE[DEFAULT_LOCALE])
    if event.cause_id not in catalogue and event.cause_id not in CATALOGUE[DEFAULT_LOCALE]:
        return ""
    return render_message(event.cause_id, event.cause_params, locale)


def event_body(event: RunEvent, locale: str) -> str:
    """The lines under the title: the figures, then the cause."""
    lines = [figures_text(event, locale)]
    cause = cause_text(event, locale)
    if cause:
        lines.append(translate("notify.cause", locale, cause=cause))
    return "\n".join(line for line in lines if line)


def event_text(event: RunEvent, locale: str) -> str:
    """The whole message: what a chat tool's text message and the plain JSON's `text` say."""
    body = event_body(event, locale)
    return f"RocBoard · {event_title(event, locale)}" + (f"\n{body}" if body else "")



__all__ = ["cause_text", "event_body", "event_text", "event_title", "figures_text"]
