"""A new run's form that was not started: the Train tab's draft.

The page keeps it in the browser (localStorage, through gr.BrowserState), not here: a draft
belongs to the person at that browser, survives a reload and a restart of the app, and the
web process keeps no state of its own that is not on disk (docs/architecture.md). What comes
back from a browser is only values for the form's fields: each is checked against its
field's widget here before the form shows it, then goes through the same checks as typed
values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from backend.config import schema

DRAFT_VERSION = 1
DRAFT_TEXT_MAX_CHARS = 65536  # a text longer than any field's limit is no form's
# What the browser keeps when there is no draft. Not None: Gradio's BrowserState never writes
# a falsy value to localStorage, so None would leave the last draft there.
NO_DRAFT: dict[str, Any] = {"version": DRAFT_VERSION, "values": None}


def draft_of(form: Mapping[str, Any], pristine: Mapping[str, Any]) -> dict[str, Any]:
    """What the browser keeps of an editable form: its values, or NO_DRAFT when they are the
    ones a new run's form opens with (nothing of the user's to keep)."""
    names = [f.name for f in schema.page_fields()]
    if all(_same(form.get(name), pristine.get(name)) for name in names):
        return NO_DRAFT
    return {"version": DRAFT_VERSION, "values": {name: form[name] for name in names if name in form}}


def form_from_draft(saved: Any, preset_ids: Iterable[str]) -> dict[str, Any] | None:
    """The form values a kept draft gives back (every field: its default where the draft has
    none, or a value its widget cannot hold, or a choice no longer offered); None when
    `saved` is no draft."""
    if not isinstance(saved, Mapping) or saved.get("version") != DRAFT_VERSION or not isinstance(saved.get("values"), Mapping):
        return None
    kept = saved["values"]
    offered = {"preset": set(preset_ids)}
    values = {**schema.form_defaults(), **schema.side_form_defaults()}
    for field in schema.page_fields():
        if field.name in kept and _fits(field, kept[field.name], offered.get(field.name)):
            values[field.name] = kept[field.name]
    return values


def _fits(field: schema.Field, value: Any, offered: set[str] | None) -> bool:
    if field.widget == "checkbox":
        return isinstance(value, bool)
    if field.widget in ("number", "integer"):
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))
    if field.widget in ("dropdown", "radio"):
        choices = offered if offered is not None else {choice for _, choice in field.choice_labels} or set(field.choices)
        return isinstance(value, (str, int, float)) and not isinstance(value, bool) and value in choices
    # Longer than its field allows is kept: the checks then say so, as for a typed value.
    return isinstance(value, str) and len(value) <= DRAFT_TEXT_MAX_CHARS


def _same(a: Any, b: Any) -> bool:
    """The same value as the page shows it: 100, 100.0 and "100" are one value."""
    return _shown(a) == _shown(b)


def _shown(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        return text


__all__ = ["DRAFT_VERSION", "NO_DRAFT", "draft_of", "form_from_draft"]
