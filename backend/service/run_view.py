"""The run panel's contents, as one typed value: what the Train tab shows of a run, named
member by member (the page maps each member to its component by name; see ui/train_tab.py).
The charts are not members: the page fetches them apart (`charts_of`, ui/live.py).

Built from a snapshot in the page's locale; every word comes from backend/view.py and every
figure from backend/charts.py, so the page decides nothing. `panel_view` gathers what the
panel shows of a run (its snapshot, why it failed, whether it can resume, its adapter's
download, its config.yaml): RocBoard.run_view is that, for the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backend import view
from backend.charts import loss_figure, memory_figure
from backend.health.words import alerts_markdown
from backend.i18n import translate
from backend.runs import CONFIG_FILE, RunNotFound, artifacts, safe_files
from backend.runs.resume import Refusal, resume_plan
from backend.service.failure import failure_cause
from backend.snapshot import RunSnapshot

if TYPE_CHECKING:
    from backend.service.run_manager import RunManager

RUN_CONFIG_SHOWN_BYTES = 256 * 1024  # a run's config.yaml is a few kB; a bigger one is not shown


@dataclass(frozen=True)
class RunView:
    """One run, as the panel shows it. `unchanged`: the page already shows this version of
    the run; only whether its timer ticks (`active`) is meant, every other member is empty."""

    run_id: str | None
    status: str = ""  # Markdown: state, exit code, cause and fix of a failure
    headline: str = ""  # Markdown: the status's first line (state and id), for the action bar
    alert: str = ""  # Markdown: NaN/inf loss or exploding gradients; the GPUs' health alerts (backend/health)
    progress: str = ""  # HTML: the progress bar and its line
    gpu_table: str = ""  # Markdown
    download: Path | None = None  # a servable copy of the adapter.zip; None: nothing to download
    log_tail: str = ""  # the end of train.log, once the run has ended
    version: tuple | None = None  # what was drawn: the page sends it back to skip unchanged views
    active: bool = False  # the run trains, waits in Slurm's queue or in this machine's: the page keeps polling it
    # The run's own stop-on-NaN setting while it trains; None: not a training run's, the
    # page's checkbox keeps its value (the setting for the next start).
    stop_on_nan: bool | None = None
    resumable: bool = False  # stopped or failed with a complete checkpoint: Resume can act
    # The run's own config.yaml, as the trainer reads it; None: read only when the run is
    # opened (it changes only at a start or a resume, so a tick does not resend it).
    config_yaml: str | None = None
    unchanged: bool = False


def idle_view(locale: str = "en") -> RunView:
    """No run watched yet."""
    return RunView(None, status=view.status_markdown(None, locale=locale), progress=view.progress_html(None, locale), config_yaml="")


def gone_view(run_id: str, locale: str = "en") -> RunView:
    """The watched run's directory was deleted."""
    gone = view.run_gone_markdown(run_id, locale)
    return RunView(run_id, status=gone, headline=gone, progress=view.progress_html(None, locale), config_yaml="")


def unchanged_view(snapshot: RunSnapshot, version: tuple) -> RunView:
    return RunView(snapshot.run.id, version=version, active=snapshot.run.alive, unchanged=True)


def run_view(
    snapshot: RunSnapshot,
    version: tuple,
    locale: str = "en",
    cause: str = "",
    fix: str = "",
    download: Path | None = None,
    resumable: bool = False,
    config_yaml: str | None = None,
    where: str = "",
    health: str = "",
) -> RunView:
    run = snapshot.run
    return RunView(
        run.id,
        status=view.status_markdown(snapshot, cause, fix, locale, where),
        headline=view.status_headline(snapshot, locale),
        alert="\n\n".join(part for part in (view.alert_markdown(snapshot, locale), health) if part),
        progress=view.progress_html(snapshot, locale),
        gpu_table=view.gpu_table_markdown(snapshot, locale),
        download=download,
        log_tail=snapshot.log_tail,
        version=version,
        active=run.alive,
        stop_on_nan=run.stop_on_nan if run.active else None,
        resumable=resumable,
        config_yaml=config_yaml,
    )


def panel_version(run_version: tuple, locale: str, queue_position: int | None) -> tuple:
    """The run panel's version: the run's (backend/service/monitors.py), the page's language,
    and a queued run's place in the queue (it moves while the run itself does not change)."""
    return (run_version, locale, queue_position)


def panel_view(run_manager: RunManager, export_dir: Path, run_id: str | None, locale: str = "en", shown: tuple | None = None) -> RunView:
    """What the run panel shows of `run_id`; `unchanged` when it is the `shown` version. The
    adapter's download is a copy in `export_dir` (artifacts.adapter_download)."""
    if run_id is None:
        return idle_view(locale)
    store = run_manager.store
    try:
        snapshot = run_manager.monitors.snapshot(run_manager.refresh(run_id))
    except RunNotFound:
        return gone_view(run_id, locale)
    position = run_manager.queue.position(run_id) if snapshot.run.state == "queued" else None
    version = panel_version(snapshot.version, locale, position)
    if version == shown:
        return unchanged_view(snapshot, version)
    cause = fix = ""
    if snapshot.run.state == "failed":
        cause, fix = failure_cause(store, store.read(run_id), locale)
    problem = run_manager.slurm.problem() if not snapshot.run.local else None
    where = view.where_markdown(snapshot.run, locale, position, problem.detail if problem else "")
    data_line = data_fingerprint_markdown(store.run_dir(run_id), locale)
    where = "  \n".join(part for part in (where, data_line) if part)
    resumable = False
    if snapshot.run.state in ("stopped", "failed"):
        resumable = not isinstance(resume_plan(store, run_id, snapshot.run), Refusal)
    download = None
    if snapshot.has_adapter and not snapshot.run.active:
        try:
            download = artifacts.adapter_download(store.run_dir(run_id), export_dir, run_id)
        except (OSError, RunNotFound):  # the adapter changed under us: the next view has it
            download = None
    config_yaml = None  # a tick of a run already shown: its config.yaml is on the page
    if shown is None:
        try:
            config_yaml = safe_files.read_text(store.run_dir(run_id), CONFIG_FILE, RUN_CONFIG_SHOWN_BYTES)
        except (OSError, UnicodeDecodeError, ValueError):
            config_yaml = ""
    # The GPUs' health alerts, as recorded in the run's folder (read again only when it changed).
    try:
        health = alerts_markdown(store.run_dir(run_id), locale)
    except RunNotFound:
        health = ""
    return run_view(snapshot, version, locale, cause, fix, download, resumable, config_yaml, where, health)


def data_fingerprint_markdown(run_dir: Path, locale: str = "en") -> str:
    """The run's data fingerprint line (backend/validate/fingerprint.py), "" when none was
    recorded: two machines that trained on the same tokens show the same digest."""
    from backend.validate.fingerprint import read_data_fingerprint

    digest = read_data_fingerprint(run_dir)
    return translate("run.data_fingerprint", locale, fingerprint=view.code_span(digest, 80)) if digest else ""


def charts_of(snapshot: RunSnapshot, locale: str = "en") -> dict[str, dict]:
    """The run's two charts, as plotly figure dicts, by the page's element name. The page
    fetches them from its own small route (ui/live.py), not through a Gradio event: see
    docs/architecture.md, "The watcher"."""
    loss_marks, memory_marks = view.attempt_marks(snapshot, locale)
    return {
        "loss": loss_figure(snapshot.chart if snapshot.chart is not None else snapshot.points, title=translate("chart.loss", locale), names=view.loss_chart_names(locale), marks=loss_marks),
        "memory": memory_figure(snapshot.memory, view.memory_title(snapshot, locale), names=view.memory_chart_names(locale), marks=memory_marks),
    }


def progress_of(snapshot: RunSnapshot, locale: str = "en") -> dict[str, float | str]:
    """The progress bar's width and words, as the watcher draws them beside the charts (read
    from the same snapshot: the step it says is the chart's last)."""
    percent, text = view.progress_parts(snapshot, locale)
    return {"percent": round(max(0.0, min(100.0, percent)), 1), "text": text}


__all__ = ["RunView", "charts_of", "gone_view", "idle_view", "progress_of", "run_view", "unchanged_view"]
