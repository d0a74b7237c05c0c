"""Small wiring helpers shared by the tabs: translatable widgets and plot payloads."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import gradio as gr
from gradio.components.plot import PlotData

from backend.i18n import translate


def plot(figure: dict | None) -> PlotData | None:
    """A backend figure dict as Gradio's plot payload (no plotly object on the hot path)."""
    return None if figure is None else PlotData(type="plotly", plot=json.dumps(figure))


class Relabel(NamedTuple):
    """What a tab redraws on a language switch: `fn(locale, *inputs)` -> updates of `outputs`.
    ui/app.py wires it on the switch itself (`language.change`), not on the page's locale
    State: Gradio 5's page fires a State's change only after a queued event, and the page's
    load and the switch are plain requests (ui/app.py says why)."""

    fn: Any
    inputs: list[Any]
    outputs: list[Any]


@dataclass
class Texts:
    """Every widget whose words are translated, so a language switch can re-label them all."""

    entries: list[tuple[Any, str, str]] = field(default_factory=list)  # (widget, attribute, key)
    locale: str = "en"

    def __call__(self, key: str, **values: Any) -> str:
        return translate(key, self.locale, **values)

    def label(self, widget: Any, key: str) -> Any:
        self.entries.append((widget, "label", key))
        return widget

    def value(self, widget: Any, key: str) -> Any:
        """For buttons and headings, whose words are their value."""
        self.entries.append((widget, "value", key))
        return widget

    @property
    def widgets(self) -> list[Any]:
        return [widget for widget, _, _ in self.entries]

    def updates(self, locale: str) -> list[Any]:
        return [gr.update(**{attribute: translate(key, locale)}) for _, attribute, key in self.entries]
