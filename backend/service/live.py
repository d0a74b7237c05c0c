"""The watcher's one question, asked once a second while a run trains: has the run the page
shows changed since it was drawn, and if so, what are its charts now?

A tick used to be a Gradio event with the whole run panel as outputs: ~7 ms of Gradio's own
work even when nothing had changed (BENCHMARKS.md, section 2). Now the page asks this
module through a small route of its own (ui/live.py): an unchanged run costs a stat of its
files and a short JSON answer; a changed one sends its two charts (drawn by the page with
`Plotly.react`) and the page asks Gradio for the rest of the panel only then.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from backend.runs import RunNotFound
from backend.service.monitors import Monitors
from backend.service.run_manager import RunManager
from backend.service.run_view import charts_of, panel_version, progress_of

# A run id as RunStore makes them; anything else is not looked up at all.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def digest(value: object) -> str:
    """A short, stable text for a value made of plain values (its repr hashed)."""
    return hashlib.blake2b(repr(value).encode("utf-8", "replace"), digest_size=8).hexdigest()


def version_key(version: tuple | None) -> str:
    """A run panel's version as the page keeps it in an attribute and sends back."""
    return "" if version is None else digest(version)


@dataclass(frozen=True)
class LiveAnswer:
    version: str  # version_key((snapshot version, locale)): what the page should show
    active: bool  # the run trains: the page keeps asking
    charts: dict[str, dict] | None = None  # {"loss": figure, "memory": figure}; None: the drawn ones are current
    gone: bool = False  # no such run (deleted, or never was)
    # The progress bar of the same reading as the charts ({"percent", "text"}): the page shows
    # it with them, so the step it says is always the loss chart's last one.
    progress: dict[str, float | str] | None = None

    def as_json(self) -> dict[str, Any]:
        answer: dict[str, Any] = {"version": self.version, "active": self.active}
        if self.charts is not None:
            answer["charts"] = self.charts
        if self.progress is not None:
            answer["progress"] = self.progress
        if self.gone:
            answer["gone"] = True
        return answer


def live_answer(monitors: Monitors, run_manager: RunManager, run_id: str, locale: str, drawn: str) -> LiveAnswer:
    """What the page needs of `run_id`, given the version it drew the charts of (`drawn`).
    Reads the run's new bytes only; builds the charts only when the version moved. A queued
    run is asked about too: it starts when the run before it ends."""
    if not RUN_ID.match(run_id):
        return LiveAnswer("", False, gone=True)
    try:
        state = run_manager.refresh(run_id)
        position = run_manager.queue.position(run_id) if state.state == "queued" else None
        version = version_key(panel_version(monitors.version(state), locale, position))
        if version == drawn:
            return LiveAnswer(version, state.alive)
        snapshot = monitors.snapshot(state)
    except RunNotFound:
        return LiveAnswer("", False, gone=True)
    return LiveAnswer(version_key(panel_version(snapshot.version, locale, position)), state.alive, charts_of(snapshot, locale), progress=progress_of(snapshot, locale))


__all__ = ["LiveAnswer", "RUN_ID", "digest", "live_answer", "version_key"]
