"""A validation report, and the comparison of two, as Markdown in the page's language.

Rendered at the edge from message ids (backend/i18n). Every value a report carries came
from a file that may have been made elsewhere (an import): the report id, model path,
dataset name, run ids, fingerprint keys and values, figure names and a note's params are
escaped where they are put into Markdown (backend/view.py escape_markdown); a note is shown
only when its id is one of the catalogue's `validate.` messages, else as an unknown note.
"""

from __future__ import annotations

import math
import time
from typing import Any

from backend.i18n import CATALOGUE, DEFAULT_LOCALE, render_message
from backend.i18n import translate as t
from backend.validate.report import Comparison, FigureMove, Note, RungResult, ValidationReport
from backend.view import escape_markdown, markdown_message

# A rung's causes are the path's own messages, and RocBoard's diagnosis of a failed run's log
# (diagnose.<rule>.cause / .fix: backend/validate/path.py failure_causes).
NOTE_PREFIX = ("validate.", "diagnose.")
MAX_SHOWN_CHARS = 300


def _e(value: Any, limit: int = MAX_SHOWN_CHARS) -> str:
    return escape_markdown(value, limit)


def _name(prefix: str, name: str, locale: str) -> str:
    """A rung, status or figure name in `locale`; a name the catalogue lacks, escaped."""
    key = f"{prefix}.{name}"
    return t(key, locale) if key in CATALOGUE[DEFAULT_LOCALE] else _e(name, 100)


def figure_name(name: str, locale: str = "en") -> str:
    base, _, gpu = name.partition(":")
    if base == "vram_peak_mib_per_gpu" and gpu:
        return t("validate.figure.vram_of_gpu", locale, gpu=_e(gpu, 20))
    return _name("validate.figure", name, locale)


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return _e(value, 200)


def note_markdown(note: Note, locale: str = "en") -> str:
    """A cause or fix of a rung: its message in `locale`, nothing a value brought rendered as
    Markdown or HTML."""
    if not note.message_id.startswith(NOTE_PREFIX) or note.message_id not in CATALOGUE[DEFAULT_LOCALE]:
        return t("validate.view.unknown_note", locale, id=_e(note.message_id, 120))
    # rendered with the values as they are, then escaped outside its code spans (as a
    # finding is: backend/view.py markdown_message), so a value inside `...` reads as written
    params = {name: value if isinstance(value, str) else _number(value) for name, value in note.params.items()}
    return markdown_message(render_message(note.message_id, params, locale))


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def _rung_markdown(rung: RungResult, locale: str) -> list[str]:
    lines = [t("validate.view.rung_heading", locale, rung=_name("validate.rung", rung.rung, locale), status=_name("validate.status", rung.status, locale))]
    if rung.run_ids:
        lines.append(t("validate.view.runs", locale, runs=", ".join(_e(run_id, 100) for run_id in rung.run_ids)))
    if rung.figures:
        lines.append("")
        lines.extend(_table([t("validate.view.figure", locale), t("validate.view.value", locale)], [[figure_name(name, locale), _number(value)] for name, value in rung.figures.items()]))
    if rung.curve:
        lines.append("")
        lines.append(t("validate.view.curve", locale, points=len(rung.curve), first=rung.curve[0][0], last=rung.curve[-1][0]))
    if rung.causes:
        lines.append("")
        lines.append(t("validate.view.causes", locale))
        lines.extend(f"- {note_markdown(note, locale)}" for note in rung.causes)
    return lines


def report_markdown(report: ValidationReport, locale: str = "en") -> str:
    """The whole report: what was asked, each rung with its figures and causes, the data
    fingerprint and the machine's."""
    def asked(name: str, limit: int = MAX_SHOWN_CHARS) -> str:
        """What the report's request says of `name` (a report file's word, not a form's), escaped."""
        return _e(report.request.get(name, "?"), limit)

    lines = [
        t("validate.view.title", locale, id=_e(report.id, 100)),
        "",
        t("validate.view.created", locale, at=time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(report.created_at)) if math.isfinite(report.created_at) else "?"),
        t(
            "validate.view.request",
            locale,
            preset=asked("preset", 100),
            model=asked("model"),
            dataset=asked("dataset"),
            gpus=asked("gpus", 20),
        ),
        t("validate.view.data_fingerprint", locale, fingerprint=_e(report.data_fingerprint, 100)) if report.data_fingerprint else t("validate.view.no_data_fingerprint", locale),
    ]
    for rung in report.rungs:
        lines.append("")
        lines.extend(_rung_markdown(rung, locale))
    if report.machine:
        lines.append("")
        lines.append(t("validate.view.machine", locale))
        lines.append("")
        lines.extend(_table([t("validate.view.fact", locale), t("validate.view.value", locale)], [[_e(key, 100), _e(value)] for key, value in sorted(report.machine.items())]))
    return "\n".join(lines)


def _value_or_none(value: str | None, locale: str) -> str:
    return _e(value) if value is not None else t("validate.compare.no_value", locale)


def _move_row(move: FigureMove, locale: str) -> list[str]:
    # numbers and signs only: the same in every language
    if move.relative:
        change = f"{move.change * 100:+.1f} %" if math.isfinite(move.change) else "+∞"
        tolerance = f"± {move.tolerance * 100:g} %"
    else:
        change = f"{move.change:+.3g}"
        tolerance = f"± {move.tolerance:g}"
    return [figure_name(move.figure, locale), _number(move.old), _number(move.new), change, tolerance]


def comparison_markdown(comparison: Comparison, locale: str = "en") -> str:
    """What changed from the older report to the newer: the fingerprint keys, the data
    fingerprint, each rung whose verdict changed and the figures beyond tolerance."""
    lines = [t("validate.compare.title", locale, old=_e(comparison.old_id, 100), new=_e(comparison.new_id, 100)), ""]
    if comparison.machine:
        lines.append(t("validate.compare.machine_changed", locale))
        lines.append("")
        lines.extend(
            _table(
                [t("validate.compare.key", locale), t("validate.compare.old", locale), t("validate.compare.new", locale)],
                [[_e(change.key, 100), _value_or_none(change.old, locale), _value_or_none(change.new, locale)] for change in comparison.machine],
            )
        )
    else:
        lines.append(t("validate.compare.machine_same", locale))
    lines.append("")
    if comparison.data_changed:
        lines.append(t("validate.compare.data_changed", locale, old=_e(comparison.old_data, 100), new=_e(comparison.new_data, 100)))
    elif comparison.old_data is not None and comparison.new_data is not None:
        lines.append(t("validate.compare.data_same", locale, fingerprint=_e(comparison.new_data, 100)))
    else:
        lines.append(t("validate.compare.data_unknown", locale))
    for rung in comparison.rungs:
        name = _name("validate.rung", rung.rung, locale)
        if rung.status_changed:
            lines.append("")
            lines.append(
                t(
                    "validate.compare.status_changed",
                    locale,
                    rung=name,
                    old=_name("validate.status", rung.old_status or "none", locale),
                    new=_name("validate.status", rung.new_status or "none", locale),
                )
            )
        if rung.moved:
            lines.append("")
            lines.append(t("validate.compare.moved", locale, rung=name))
            lines.append("")
            headers = ["validate.view.figure", "validate.compare.old", "validate.compare.new", "validate.compare.change", "validate.compare.tolerance"]
            lines.extend(_table([t(key, locale) for key in headers], [_move_row(move, locale) for move in rung.moved]))
    if not comparison.moved:
        lines.append("")
        lines.append(t("validate.compare.nothing_moved", locale))
    return "\n".join(lines)


__all__ = ["comparison_markdown", "figure_name", "note_markdown", "report_markdown"]
