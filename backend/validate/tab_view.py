"""What the Validate tab shows (ui/validate_tab.py only wires it): the page's values as a
ValidationRequest, a path's status as Markdown, the kept reports as dropdown choices, a
refusal (bad input, a report file refused) in the page's language. No gradio here.

Every value that came from the user or from a file (a model path in a refusal, an uploaded
report's key names) is escaped where it is put into Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from backend.i18n import CATALOGUE, DEFAULT_LOCALE, localized, render_message
from backend.i18n import translate as t
from backend.validate.cli import drill_save_steps
from backend.validate.path import PathStatus, ValidationRequest
from backend.validate.report import RUNGS, STATUSES, Note, ValidationReport
from backend.validate.view import note_markdown, report_markdown
from backend.view import escape_markdown

# A rung's state while a path runs: the report's verdicts, and these two before one is known.
RUNNING_STATES = ("waiting", "running")
REFUSAL_PREFIX = "validate."


def rung_choices(locale: str = DEFAULT_LOCALE) -> list[tuple[str, str]]:
    """(name in `locale`, rung) of each rung, in the path's order (the several-nodes rung runs
    on a Slurm cluster: the desk refuses it where none is set up)."""
    return [(t(f"validate.rung.{rung}", locale), rung) for rung in RUNGS]


def _whole(value: Any) -> Any:
    """A number box's value as a whole number where it is one (Gradio hands 2.0 or 2); anything
    else is handed on as it is, for the request's check to refuse by name."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


def request_from_page(
    preset_id: str | None,
    model: Any,
    dataset_dir: Any,
    dataset: Any,
    gpus: Any,
    drill_step: Any,
    tolerance: Any,
    rungs: Sequence[Any] | None,
    nodes: Any = None,
    slurm_partition: Any = "",
) -> ValidationRequest:
    """The tab's values as a request (checked by the desk: nothing is decided here); an empty
    model, folder or dataset box is the demo's. The drill's checkpoint interval follows the
    drill step as on the command line (backend/validate/cli.py drill_save_steps); no nodes
    given: the request's default (2)."""
    drill = _whole(drill_step)
    defaults = ValidationRequest()
    return ValidationRequest(
        preset=str(preset_id or defaults.preset),
        model=str(model or "").strip(),
        dataset_dir=str(dataset_dir or "").strip(),
        dataset=str(dataset or "").strip(),
        gpus=_whole(gpus),
        rungs=tuple(str(rung) for rung in (rungs or ())),
        tolerance=float(tolerance) if isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool) else tolerance,
        drill_step=drill,
        save_steps=drill_save_steps(drill) if isinstance(drill, int) and drill > 0 else defaults.save_steps,
        nodes=defaults.nodes if nodes is None else _whole(nodes),
        slurm_partition=str(slurm_partition or "").strip(),
    )


def _param(value: Any, locale: str) -> str:
    text = localized(value, locale) if callable(getattr(value, "text", None)) else value
    if isinstance(text, bool) or not isinstance(text, (int, float)):
        return escape_markdown(text, 300)
    return f"{text:.6g}" if isinstance(text, float) else str(text)


def refusal_markdown(message_id: str, params: Mapping[str, Any], locale: str = DEFAULT_LOCALE, frame: str = "validate.tab.refused") -> str:
    """A request or a report file refused, said in `locale` inside `frame` ("Nothing was
    started: ..."); a value that is a message itself (an OS or JSON error) in `locale` too,
    every value escaped."""
    if message_id.startswith(REFUSAL_PREFIX) and message_id in CATALOGUE[DEFAULT_LOCALE]:
        # A mapping, not keywords: a message may have a `{key}` placeholder (validate.report.unknown_key).
        reason = render_message(message_id, {name: _param(value, locale) for name, value in params.items()}, locale)
    else:
        reason = t("validate.view.unknown_note", locale, id=escape_markdown(message_id, 120))
    return t(frame, locale, reason=reason)


def state_name(state: str, locale: str = DEFAULT_LOCALE) -> str:
    if state in STATUSES:
        return t(f"validate.status.{state}", locale)
    if state in RUNNING_STATES:
        return t(f"validate.tab.state.{state}", locale)
    return escape_markdown(state, 40)


def _progress(note: Note, locale: str) -> str:
    """The path's progress line, its rung named in `locale` (the path says the rung's id)."""
    rung = note.params.get("rung")
    if isinstance(rung, str) and rung in RUNGS:
        note = Note(note.message_id, {**note.params, "rung": t(f"validate.rung.{rung}", locale)})
    return note_markdown(note, locale)


def status_markdown(status: PathStatus | None, report: ValidationReport | None, locale: str = DEFAULT_LOCALE) -> str:
    """The path now: a table of its rungs and their states, what it is doing, and while it
    runs, below it, the report saved so far (each ended rung's verdict, figures and, on a fail,
    cause and fix; once the path ended, the tab shows its report as the one chosen among the
    reports kept). No path: the report alone, or what to do."""
    if status is None:
        return report_markdown(report, locale) if report is not None else t("validate.tab.idle", locale)
    lines = [
        f"| {t('validate.tab.rung', locale)} | {t('validate.tab.state', locale)} |",
        "|---|---|",
        *(f"| {t(f'validate.rung.{rung}', locale) if rung in RUNGS else escape_markdown(rung, 40)} | {state_name(state, locale)} |" for rung, state in status.rungs.items()),
        "",
        _progress(status.progress, locale),
    ]
    if status.error is not None:
        lines += ["", _progress(status.error, locale)]
    if report is not None and not status.done:
        lines += ["", report_markdown(report, locale)]
    return "\n".join(lines)


def status_key(status: PathStatus | None) -> str:
    """What a tick compares to tell whether the panel changed since it was last drawn."""
    if status is None:
        return ""
    progress = (status.progress.message_id, sorted((k, str(v)) for k, v in status.progress.params.items()))
    error = status.error.message_id if status.error is not None else None
    return repr((status.path_id, sorted(status.rungs.items()), progress, status.report_id, status.done, error))


def report_choices(reports: Sequence[ValidationReport], locale: str = DEFAULT_LOCALE) -> list[tuple[str, str]]:
    """(label, id) of each kept report, newest first: its id and each rung's verdict."""
    choices = []
    for report in reports:
        rungs = t("actions.separator", locale).join(
            t("validate.tab.rung_verdict", locale, rung=t(f"validate.rung.{r.rung}", locale) if r.rung in RUNGS else r.rung, status=state_name(r.status, locale)) for r in report.rungs
        )
        choices.append((t("validate.tab.report_choice", locale, id=report.id, rungs=rungs or "-"), report.id))
    return choices


__all__ = ["refusal_markdown", "report_choices", "request_from_page", "rung_choices", "state_name", "status_key", "status_markdown"]
