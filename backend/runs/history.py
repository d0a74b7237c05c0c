"""The runs view: one summary line per run, and the loss curves of several runs overlaid.

Everything is read from the run directories, never from memory of the web process, so the
view is the same after a restart. It is also cheap with many long runs, and bounded with a
hostile one: a summary reads only the end of each trainer_log.jsonl, an overlay curve reads
a long log in evenly spaced windows (both through backend.runs.trainer_log, the one reader of
that file, bounded however the file looks), and what was read is kept until the file's size or
mtime changes (a finished run is read once; backend.runs.file_cache). Every file is opened
inside its run without following links (backend.runs.safe_files).
"""

from __future__ import annotations

import json
import math
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from backend.charts import LIGHT_LAYOUT, MAX_DISPLAY_POINTS, downsample_indices, smooth
from backend.config import schema
from backend.evaluate.results import EVALUATION_FILE, RESULTS_FILE, Scores, format_scores, read_scores
from backend.health.record import read_alerts
from backend.i18n import CATALOGUE, DEFAULT_LOCALE, translate
from backend.runs import (
    OUTPUT_DIR,
    SMALL_FILE_MAX_BYTES,
    STATE_FILE,
    RunNotFound,
    RunState,
    RunStore,
    safe_files,
    trainer_log,
)
from backend.runs.file_cache import file_key as _file_key
from backend.runs.file_cache import memo as _memo
from backend.runs.file_cache import prune

# The table's columns (each header runs.column.<column>): which run, then one per column the
# form's fields fill (schema.Field.column, in the schema's order: dataset, learning_rate,
# length), then how it went.
_RUN_COLUMNS: tuple[str, ...] = ("run", "name", "kind", "preset", "model")
_OUTCOME_COLUMNS: tuple[str, ...] = ("state", "where", "steps", "last_loss", "best_eval_loss", "scores", "duration", "started")
# Columns whose header is not runs.column.<column> (the evaluation's, backend/evaluate).
_HEADER_IDS = {"kind": "eval.column.kind", "scores": "eval.column.scores"}


def setting_columns() -> tuple[str, ...]:
    """The columns the run's settings fill, in the schema's order (read at call time)."""
    return tuple(dict.fromkeys(f.column for f in schema.run_fields() if f.column))


def history_columns() -> tuple[str, ...]:
    """Every column, in the table's order."""
    return _RUN_COLUMNS + setting_columns() + _OUTCOME_COLUMNS


def _column_fields(column: str) -> list[schema.Field]:
    return [f for f in schema.run_fields() if f.column == column]


def _header_id(column: str) -> str:
    """runs.column.<column>; a field's column without one is headed by the field's label."""
    if column in _HEADER_IDS:
        return _HEADER_IDS[column]
    if f"runs.column.{column}" not in CATALOGUE[DEFAULT_LOCALE] and _column_fields(column):
        return _column_fields(column)[0].label_id
    return f"runs.column.{column}"


HISTORY_COLUMNS: tuple[str, ...] = history_columns()  # as the schema stands at import
# The columns the Runs tab's table shows: which run, how it went, where, when. Every column
# (history_columns()) is in a run's details, opened by choosing it (view.run_details_markdown).
TABLE_COLUMNS: tuple[str, ...] = ("run", "name", "state", "where", "last_loss", "best_eval_loss", "scores", "duration", "started")


def history_headers(locale: str = "en", columns: Sequence[str] | None = None) -> list[str]:
    """The column headers of `columns` (default: all of them) in `locale`."""
    return [translate(_header_id(column), locale) for column in (history_columns() if columns is None else columns)]


# The English headers, by which code and tests name a column (the catalogue holds the words).
HISTORY_HEADERS: tuple[str, ...] = tuple(history_headers("en"))

ATTEMPTS_DIR = "attempts"  # backend.runs.resume archives each earlier attempt's state.json here

# One colour per run in an overlay, distinct on white and for common colour blindness
# (Okabe–Ito), the first being the single-run chart's red.
OVERLAY_COLORS = ("rgb(237,28,36)", "rgb(0,114,178)", "rgb(0,158,115)", "rgb(230,159,0)", "rgb(204,121,167)", "rgb(86,180,233)", "rgb(213,94,0)", "rgb(0,0,0)")


@dataclass(frozen=True)
class RunSummary:
    id: str
    name: str
    preset: str
    model: str
    state: str
    step: int | None
    total_steps: int | None
    last_loss: float | None
    duration_s: float | None  # training time over all attempts; still growing while active
    created: str  # ISO 8601, UTC
    attempts: int
    exit_code: int | None
    stop_reason: str
    # What the run was started with (config.yaml, else form.json), typed, by form name: the
    # fields a column of the table shows (schema.Field.column), those the run's files set.
    settings: tuple[tuple[str, Any], ...] = ()
    best_eval_loss: float | None = None  # the lowest eval_loss the trainer logged
    kind: str = "train"  # "train" or "evaluate" (RunState.kind)
    source_run: str = ""  # of an evaluation: the run it evaluated
    # An evaluation's scores; a training run's are those of its latest finished evaluation.
    scores: Scores | None = None
    executor: str = "local"  # where it runs: "local" or "slurm" (RunState.executor)
    job_id: str = ""  # a Slurm run's job (the current attempt's)
    health_alerts: int = 0  # GPU health alerts recorded (backend/health): the state cell says how many
    gpus: tuple[int, ...] | None = None  # the GPUs it was given side by side (launch.json), if any


# --- reading a run's files, cached (its trainer log: backend.runs.trainer_log) -----------

_attempt_cache: dict[Path, tuple[tuple[int, int], tuple[float, float] | None]] = {}
_settings_cache: dict[Path, tuple[tuple[tuple[int, int] | None, ...], tuple[tuple[str, Any], ...]]] = {}
_scores_cache: dict[Path, tuple[tuple[int, int], Scores | None]] = {}



def _attempt_span(run_dir: Path, relative: str) -> tuple[float, float] | None:
    """(started_at, ended_at) of an archived attempt, from its state.json (immutable once
    archived, so cached by size and mtime)."""
    state_file = run_dir / relative
    key = _file_key(state_file, run_dir)
    if key is None:
        return None

    def read() -> tuple[float, float] | None:
        try:
            data = json.loads(safe_files.read_text(run_dir, relative, SMALL_FILE_MAX_BYTES))
            started, ended = data.get("started_at"), data.get("ended_at")
            if isinstance(started, (int, float)) and isinstance(ended, (int, float)) and ended >= started:
                return float(started), float(ended)
        except (OSError, ValueError, AttributeError):
            pass
        return None

    return _memo(_attempt_cache, state_file, key, read)


def read_settings(run_dir: Path) -> tuple[tuple[str, Any], ...]:
    """The typed values of the fields the table's columns show (schema.Field.column), by form
    name: from config.yaml (what the trainer read), else form.json, each read through the
    schema (backend/config/run_form.py); a field neither file sets, or sets to a value that
    does not parse, is left out. Each read bounded (SMALL_FILE_MAX_BYTES), without following
    links, and cached while both files keep their size and mtime."""
    from backend.runs import CONFIG_FILE, FORM_FILE

    files = (CONFIG_FILE, FORM_FILE)
    key = tuple(_file_key(run_dir / name, run_dir) for name in files)
    return _memo(_settings_cache, run_dir, key, lambda: _merged_settings(run_dir, files, key))


def _merged_settings(run_dir: Path, files: tuple[str, ...], key: tuple) -> tuple[tuple[str, Any], ...]:
    """config.yaml's values, each missing one filled in from form.json (`key`: each file's
    size and mtime, None when it is not there)."""
    import yaml

    from backend.config.run_form import SavedRun, form_from_args, saved_run

    def form_values(name: str, text: str) -> Any:
        # config.yaml has LLaMA-Factory's keys (each field's codec reads its own back); form.json the form's.
        return form_from_args(yaml.safe_load(text)) if name.endswith((".yaml", ".yml")) else json.loads(text)

    found: list[SavedRun] = []
    for name, file_key in zip(files, key, strict=True):
        if file_key is None:
            continue
        try:
            found.append(saved_run(form_values(name, safe_files.read_text(run_dir, name, SMALL_FILE_MAX_BYTES))))
        except (OSError, ValueError, yaml.YAMLError):
            continue
    settings = []
    for form_field in schema.run_fields():
        if form_field.column:
            known = next((saved for saved in found if saved.known(form_field.name)), None)  # config.yaml's wins
            if known is not None:
                settings.append((form_field.name, known.config.value(form_field.name)))
    return tuple(settings)



def read_evaluated_dataset(run_dir: Path) -> str:
    """The held-out dataset an evaluation predicted on, from its evaluation.json."""
    try:
        data = json.loads(safe_files.read_text(run_dir, EVALUATION_FILE, SMALL_FILE_MAX_BYTES))
    except (OSError, ValueError):
        return ""
    name = data.get("dataset_name") if isinstance(data, dict) else None
    return name[:200] if isinstance(name, str) else ""


def read_run_scores(run_dir: Path) -> Scores | None:
    """An evaluation run's scores (output/predict_results.json), cached by size and mtime."""
    path = run_dir / OUTPUT_DIR / RESULTS_FILE
    key = _file_key(path, run_dir)
    if key is None:
        return None
    return _memo(_scores_cache, path, key, lambda: read_scores(run_dir))


def _duration(run_dir: Path, state: RunState, now: float) -> float | None:
    """Training time over all attempts. A span is counted once: a resume that failed to
    launch archives the same attempt twice (attempts/2 and attempts/2-2)."""
    spans: set[tuple[float, float]] = set()
    if state.attempts > 1:
        for name, found in safe_files.list_dir(run_dir, ATTEMPTS_DIR):
            if name.startswith(".") or not stat.S_ISDIR(found.st_mode):
                continue
            span = _attempt_span(run_dir, f"{ATTEMPTS_DIR}/{name}/{STATE_FILE}")
            if span is not None:
                spans.add(span)
    end = now if state.active else state.ended_at
    if state.started_at is not None and end is not None:
        spans.add((state.started_at, max(state.started_at, end)))
    if not spans:
        return None
    return sum(ended - started for started, ended in spans)


def _prune(root: Path, live_dirs: set[Path]) -> None:
    """Forgets cached reads of this runs directory's runs that are no longer on disk."""
    prune((_attempt_cache, _settings_cache, _scores_cache), root, live_dirs)
    trainer_log.forget_gone_runs(root, live_dirs)


# --- the table --------------------------------------------------------------------------


def summarize_runs(store: RunStore, now: float | None = None) -> list[RunSummary]:
    """One summary per run on disk, newest first, from each state file and log tail.

    States are taken as written: the caller settles runs whose trainer ended unseen first
    (RocBoard.runs() does)."""
    now = time.time() if now is None else now
    summaries = []
    live: set[Path] = set()
    states = store.list()
    # Each training run's latest finished evaluation (the list is newest first).
    evaluated: dict[str, Scores] = {}
    eval_scores: dict[str, Scores | None] = {}
    for state in states:
        if state.kind != "evaluate":
            continue
        try:
            eval_scores[state.id] = scores = read_run_scores(store.run_dir(state.id)) if state.state == "finished" else None
        except RunNotFound:
            continue
        if scores is not None and state.source_run and state.source_run not in evaluated:
            evaluated[state.source_run] = scores
    for state in states:
        try:
            run_dir = store.run_dir(state.id)
        except RunNotFound:
            continue  # deleted between the listing and now
        live.add(run_dir)
        log = trainer_log.log_path(run_dir)
        tail = trainer_log.read_log_tail(log, run_dir)
        # An evaluation trains nothing: no learning rate nor length, and its dataset is the
        # held-out one (its form.json is the trained run's).
        settings = read_settings(run_dir) if state.kind != "evaluate" else (("dataset", read_evaluated_dataset(run_dir)),)
        summaries.append(
            RunSummary(
                id=state.id,
                name=state.name,
                preset=state.preset,
                model=state.model,
                state=state.state,
                step=tail.step,
                total_steps=tail.total_steps,
                last_loss=tail.last_loss,
                duration_s=_duration(run_dir, state, now),
                created=state.created,
                attempts=state.attempts,
                exit_code=state.exit_code,
                stop_reason=state.stop_reason,
                settings=settings,
                best_eval_loss=trainer_log.read_best_eval_loss(log, run_dir),
                kind=state.kind,
                source_run=state.source_run,
                scores=eval_scores.get(state.id) if state.kind == "evaluate" else evaluated.get(state.id),
                executor=state.executor,
                job_id=state.job_id,
                health_alerts=len(read_alerts(run_dir)),
                gpus=_given_gpus(run_dir) if state.local else None,
            )
        )
    _prune(store.root, live)
    return summaries


def short_model(model: str) -> str:
    """A local path shortened to its last two parts; a hub id ("org/name") kept whole."""
    if model.startswith(("/", ".", "~")) or "\\" in model:
        parts = [part for part in Path(model).parts if part not in ("/", "\\")]
        return "/".join(parts[-2:]) if len(parts) > 2 else model
    return model


def format_duration(seconds: float | None, locale: str = "en") -> str:
    """A duration in the units of `locale` ("1m 05s", "1 分 05 秒"): the one formatter of
    durations the page shows (the runs table, the Train tab's elapsed time and ETA)."""
    if seconds is None:
        return ""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return translate("duration.seconds", locale, seconds=seconds)
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return translate("duration.minutes", locale, minutes=minutes, seconds=seconds)
    hours, minutes = divmod(minutes, 60)
    return translate("duration.hours", locale, hours=hours, minutes=minutes)


def format_loss(loss: float | None) -> str:
    if loss is None:
        return ""
    if not math.isfinite(loss):
        return str(loss)  # nan, inf: said plainly, they are what the user must see
    return f"{loss:.4f}"


def format_length(epochs: float | None, max_steps: int | None, locale: str = "en") -> str:
    """"3 epochs" or, where max_steps > 0 overrides them, "200 steps" (max)."""
    if max_steps is not None and max_steps > 0:
        return translate("runs.length_steps", locale, steps=max_steps)
    if epochs is None:
        return ""
    return translate("runs.length_epochs", locale, epochs=f"{epochs:g}")


def format_rate(rate: float | None) -> str:
    return "" if rate is None else f"{rate:g}"


def format_started(created: str) -> str:
    """The creation time in the server's local time, to the minute."""
    try:
        return datetime.fromisoformat(created).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return created


def _setting_value(s: RunSummary, column: str) -> Any:
    """The typed value a settings column of `s` holds (the length column: max steps when > 0,
    else the epochs); None where the run's files do not say."""
    values = dict(s.settings)
    if column == "length":
        steps = values.get("max_steps")
        return steps if steps is not None and steps > 0 else values.get("num_train_epochs")
    return next((values[f.name] for f in _column_fields(column) if f.name in values), None)


def _setting_words(s: RunSummary, column: str, locale: str) -> str:
    if column == "length":
        values = dict(s.settings)
        return format_length(values.get("num_train_epochs"), values.get("max_steps"), locale)
    value = _setting_value(s, column)
    if value is None:
        return ""
    if isinstance(value, float):
        return format_rate(value)
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _given_gpus(run_dir: Path) -> tuple[int, ...] | None:
    """The GPUs a local run was given side by side (its launch.json; none on one slot)."""
    from backend.runs.queue import read_launch_gpus

    try:
        return read_launch_gpus(run_dir)[1]
    except (OSError, ValueError):
        return None


def _where_words(s: RunSummary, locale: str) -> str:
    if s.executor == "slurm":
        return translate("where.slurm", locale, job=s.job_id or "?")
    where = translate("where.local", locale)
    if s.gpus:
        where += " · " + translate("runs.gpus", locale, gpus=",".join(str(g) for g in s.gpus))
    return where


def summary_words(s: RunSummary, locale: str = "en") -> dict[str, str]:
    """What each column (history_columns()) shows of a run, in `locale`; the state words are the
    catalogue's (state.*)."""
    steps = "" if s.step is None else (f"{s.step} / {s.total_steps}" if s.total_steps else str(s.step))
    state = translate(f"state.{s.state}", locale) if f"state.{s.state}" in CATALOGUE[DEFAULT_LOCALE] else s.state
    if s.attempts > 1:
        state = translate("runs.state_attempt", locale, state=state, attempts=s.attempts)
    if s.kind == "evaluate":  # the table has no Kind column: an evaluation says so here
        state = translate("runs.state_evaluation", locale, state=state)
    if s.health_alerts:  # the run's panel and `app.py status` say what they are
        state = translate("health.runs_mark", locale, state=state, count=s.health_alerts)
    return {
        "run": s.id,
        "name": s.name,
        "kind": translate(f"eval.kind.{s.kind}", locale),
        "preset": s.preset,
        "model": short_model(s.model),
        **{column: _setting_words(s, column, locale) for column in setting_columns()},
        "state": state,
        "where": _where_words(s, locale),
        "steps": steps,
        "last_loss": format_loss(s.last_loss),
        "best_eval_loss": format_loss(s.best_eval_loss),
        "scores": format_scores(s.scores),
        "duration": format_duration(s.duration_s, locale),
        "started": format_started(s.created),
    }


def summaries_table(summaries: Sequence[RunSummary], locale: str = "en", columns: Sequence[str] | None = None) -> list[list[Any]]:
    """Rows for a gr.Dataframe whose headers are `history_headers(locale, columns)`."""
    rows = []
    columns = history_columns() if columns is None else columns
    for s in summaries:
        words = summary_words(s, locale)
        rows.append([words[column] for column in columns])
    return rows


def summaries_sort_values(summaries: Sequence[RunSummary], columns: Sequence[str] | None = None) -> list[list[Any]]:
    """What each cell of `summaries_table` sorts by: numbers where the table shows a number
    ("1e-05" after "0.0002" as text; "13 / 30" after "5 / 30"), the ISO time for the start,
    None where the shown words sort right (RocBoard.history_table puts them in)."""

    def finite(value: float | None) -> float | None:
        return value if value is not None and math.isfinite(value) else None

    rows = []
    columns = history_columns() if columns is None else columns
    for s in summaries:
        numbers = {column: _setting_value(s, column) for column in setting_columns()}
        values = {
            **{column: value for column, value in numbers.items() if isinstance(value, (int, float)) and not isinstance(value, bool)},
            "steps": s.step,
            "last_loss": finite(s.last_loss),
            "best_eval_loss": finite(s.best_eval_loss),
            "scores": None if s.scores is None else finite(s.scores.bleu4),
            "duration": s.duration_s,
            "started": s.created,
        }
        rows.append([values.get(column) for column in columns])
    return rows


# --- the overlay chart ----------------------------------------------------------------


def _json_number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def overlay_figure(store: RunStore, run_ids: Sequence[str], max_points: int = MAX_DISPLAY_POINTS, locale: str = "en") -> dict:
    """A plotly figure dict with one smoothed loss line per run, over steps."""
    data = []
    missing = []
    names = [state.name for state in store.list()]
    for index, run_id in enumerate(dict.fromkeys(run_ids)):  # each run once, in the order asked
        try:
            state = store.read(run_id)
            run_dir = store.run_dir(run_id)
        except RunNotFound:
            missing.append(str(run_id))
            continue
        with_loss = [p for p in trainer_log.read_curve(trainer_log.log_path(run_dir), run_dir) if p.loss is not None]
        steps = [p.step for p in with_loss]
        smoothed = smooth([float(p.loss) for p in with_loss if p.loss is not None])
        keep = downsample_indices(len(steps), max_points, smoothed)
        # Two runs with one name (every demo is "demo") are told apart by their ids.
        label = state.name if names.count(state.name) <= 1 else f"{state.name} ({run_id})"
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": label,
                "x": [steps[i] for i in keep],
                "y": [_json_number(smoothed[i]) for i in keep],
                "line": {"color": OVERLAY_COLORS[index % len(OVERLAY_COLORS)], "width": 2},
                "hovertemplate": f"{label}<br>{translate('chart.step', locale)} %{{x}}<br>{translate('chart.loss_series', locale)} %{{y:.4f}}<extra></extra>",
            }
        )
    title = translate("chart.overlay_title", locale)
    if missing:
        title = translate("chart.overlay_title_missing", locale, runs=", ".join(missing))
    layout: dict[str, Any] = {
        **LIGHT_LAYOUT,
        "title": {"text": title},
        "xaxis": {"title": {"text": translate("chart.step", locale)}},
        "yaxis": {"title": {"text": translate("chart.loss_series", locale)}},
        "showlegend": True,
    }
    if not any(trace["x"] for trace in data):
        layout["annotations"] = [{"text": translate("chart.overlay_empty", locale), "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}]
    return {"data": data, "layout": layout}


__all__ = [
    "HISTORY_COLUMNS",
    "HISTORY_HEADERS",
    "TABLE_COLUMNS",
    "RunSummary",
    "format_duration",
    "summaries_sort_values",
    "format_length",
    "history_columns",
    "history_headers",
    "overlay_figure",
    "read_settings",
    "short_model",
    "summaries_table",
    "summarize_runs",
    "summary_words",
]
