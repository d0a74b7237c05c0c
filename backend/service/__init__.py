"""RocBoard's backend facade: what the page (and the tests) call.

Its shape (docs/architecture.md, "The facade"; held by tests/test_architecture.py): the page
calls RocBoard's own methods, and the desks it hands out by name (`RocBoard.DESKS`: data,
chat, evaluations, exports, validation), each the whole of one tab's questions. Everything else it holds
(store, run_manager, pipeline, monitors, decisions, doctor, helper) is the backend's own: the
page never reaches into it. The facade decides nothing itself; each method is one call into
the part whose concern it is.

A thin front over parts with one job each, composed once per app (not per browser tab):

- `ConfigPipeline` (pipeline.py): form -> typed config -> findings; preview, estimate,
  YAML import and export; LLaMA-Factory's own check behind a single-flight cache.
- `RunManager` (run_manager.py): start, stop, resume, re-attach, delete; one lock.
- `Monitors` (monitors.py): the live state of each run, read incrementally from its files.
- `RunDecisions` (decisions.py): what the backend decides about a run on its own (stop on
  NaN, build the adapter zip), whether or not a tab is open.
- `DoctorCache` (doctor_cache.py): the machine's checks, gathered once.
- `RunView` (run_view.py): the run panel's contents, typed, for the page to show
  (`panel_view`); why a run failed: failure.py; its adapter's download: runs/artifacts.py.
- `DataDesk` (data_desk.py): the user's datasets: read a file, register it, measure it.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.config import RunConfig
from backend.config.presets import PRESETS_DIR, HardwarePreset, PresetLoadError
from backend.export.target import default_export_roots
from backend.findings import Finding, has_problems
from backend.notify import Notifier
from backend.runs import RunNotFound, RunState, RunStore, artifacts
from backend.runs.launcher import STOPPED_BY_USER, Launcher
from backend.service.chat_desk import ChatDesk
from backend.service.data_desk import DEFAULT_MAX_UPLOAD_BYTES, DataDesk, default_data_roots
from backend.service.decisions import RunDecisions
from backend.service.doctor_cache import DoctorCache
from backend.service.evaluation_desk import EvaluationDesk
from backend.service.export_desk import ExportDesk
from backend.service.failure import failure_cause
from backend.service.live import LiveAnswer, live_answer
from backend.service.monitors import CATCH_UP_SAMPLE_BYTES, POLL_INTERVAL_S, Monitors, RunMonitor
from backend.service.pipeline import ConfigPipeline, LlamaFactoryCheckCache, Preview
from backend.service.run_manager import RunManager, StartResult
from backend.service.run_view import RunView, panel_view
from backend.service.validation_desk import ValidationDesk
from backend.snapshot import RunSnapshot
from backend.sweep.desk import SweepDesk

if TYPE_CHECKING:
    from backend.config.distributed import DistributedPlan
    from backend.config.estimate import MemoryEstimate
    from backend.config.yaml_import import FixResult, FormLoad, ImportResult
    from backend.doctor import Check
    from backend.health import HealthSettings
    from backend.llama_factory.helper_client import LlamaFactoryHelper
    from backend.telemetry.sampler import Sampler


@dataclass(frozen=True)
class QueueView:
    """The Runs tab's queues: this machine's (Markdown; the runs waiting in it, first to start
    first) and Slurm's (Markdown, "" when not shown; `slurm_shown`: Slurm is set up here or a
    run used it)."""

    local: str
    queued: list[str]
    slurm: str
    slurm_shown: bool


def demo_form() -> dict[str, Any]:
    """The form as `make run` opens it: the CPU demo preset on the tiny offline model."""
    from backend.config.presets import demo_form as form

    return form()


class RocBoard:
    """One per app: the runs directory and the parts that work on it."""

    # The parts the page is handed by name, each a tab's whole interface (the page may call
    # `board.<desk>.<method>`); every other attribute set in __init__ is not the page's.
    DESKS = ("data", "chat", "evaluations", "exports", "validation", "sweeps")

    def __init__(
        self,
        runs_dir: Path,
        presets_dir: Path = PRESETS_DIR,
        sampler: Sampler | None = None,
        export_dir: Path | None = None,
        lf_cache: LlamaFactoryCheckCache | None = None,
        warm_helper: bool = False,
        data_roots: Sequence[Path] | None = None,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        export_roots: Sequence[Path] | None = None,
        health: HealthSettings | None = None,
        notifier: Notifier | None = None,
    ):
        self.store = RunStore(Path(runs_dir))
        self.store.ensure_root()
        # The user's datasets: a folder of RocBoard's own under the runs directory.
        roots = list(data_roots) if data_roots is not None else default_data_roots()
        self.data = DataDesk(self.store.root, roots, max_upload_bytes)
        # Downloads are served from a copy in the system temp dir: Gradio serves files the
        # app returns from there, and nothing else of the runs directory is ever exposed.
        self.export_dir = export_dir or Path(tempfile.mkdtemp(prefix="rocboard-exports-"))
        self.export_dir.mkdir(parents=True, exist_ok=True)
        # Other keys may read a file where a dataset may be read from (backend/config/path_keys.py).
        self.pipeline = ConfigPipeline(self.store.root, self.export_dir, presets_dir, lf_cache, read_roots=roots)
        self.monitors = Monitors(self.store)
        self.run_manager = RunManager(self.store, self.pipeline, self.monitors, sampler)
        # The GPU health thresholds (python app.py --health-*; backend/health).
        # Word when a run ends (backend/notify): the webhook of --webhook-url, the tabs' notifications.
        self.notifier = notifier or Notifier()
        self.decisions = RunDecisions(self.run_manager, self.monitors, health=health, notifier=self.notifier)
        self.run_manager.on_launch = self.decisions.follow
        if sampler is not None:
            sampler.after_round(self.decisions.wake)  # the runs are looked at on fresh readings
        # The Doctor reads the machine the sampler reads (a fake /sys with --sysfs-root).
        self.doctor = DoctorCache(getattr(sampler, "sysfs_root", None) or Path("/sys"), self.store.root, self.run_manager.slurm.client)
        # Try and ship: chat with a run (its servers let go of the GPU when a trainer starts),
        # evaluate it on held-out data, merge and export it.
        self.chat = ChatDesk(self.store, self.run_manager, export_dir=self.export_dir)
        self.run_manager.before_launch.append(self.chat.let_go_for)
        self.run_manager.chat_gpus = self.chat.gpus_in_use  # side by side: runs take the chat's GPU last
        self.evaluations = EvaluationDesk(self.store, self.run_manager, self.pipeline, self.data)
        # Exports write under their own folder, ~/rocboard-exports, unless --export-root names others.
        self.exports = ExportDesk(self.store, export_roots if export_roots is not None else default_export_roots(), export_dir=self.export_dir)
        # The validation path (one GPU, N GPUs, a fault drill): its rungs are runs like any other.
        self.validation = ValidationDesk(self, lambda: self.presets, self.active_run, export_dir=self.export_dir, slurm=self.run_manager.slurm.client.configured)
        # Sweeps (backend/sweep): a form's fields varied, each point a run through start() below.
        self.sweeps = SweepDesk(self)
        # Their early stop and their end (said once) are the app's: its queue keeper looks after them.
        self.run_manager.keeper_tasks.append(self.sweeps.look_after)
        self.helper: LlamaFactoryHelper | None = None
        if warm_helper:
            self.start_helper()

    def start_helper(self) -> None:
        """Starts (or joins) the app's LLaMA-Factory helper: torch, transformers and llamafactory
        imported once in the background; LLaMA-Factory's checks and the trainers fork from it
        (backend/llama_factory/helper_client.py). Off with ROCBOARD_WARM_START=0. The app's
        serve path asks for it; tests that want it ask too (each would import torch again)."""
        from backend.llama_factory.helper_client import install_shared, warm_start_enabled
        from backend.runs.launcher import helper_env

        if not warm_start_enabled():
            return
        self.helper = install_shared(lambda: helper_env(self.store.root))
        self.run_manager.launcher.helper = self.helper

    def close(self) -> None:
        """The app stops: chat servers and an export in progress end with it (0 processes
        left); trainers keep running and are found again on the next start, and so do the
        queue and the Slurm jobs."""
        self.run_manager.stop_keeping_queue()
        self.validation.close()
        self.sweeps.close()
        self.chat.close()
        self.exports.close()
        self.notifier.close()
        self.close_helper()

    def close_helper(self) -> None:
        """Ends the helper (trainers it started keep running); runs start cold from now on."""
        from backend.llama_factory.helper_client import close_shared

        self.run_manager.launcher.helper = None
        if self.helper is not None:
            self.helper = None
            close_shared()

    @property
    def presets(self) -> dict[str, HardwarePreset]:
        return self.pipeline.presets

    @property
    def preset_errors(self) -> list[PresetLoadError]:
        return self.pipeline.preset_errors

    @property
    def launcher(self) -> Launcher:
        return self.run_manager.launcher

    @property
    def sampler(self) -> Sampler | None:
        return self.run_manager.sampler

    @property
    def runs_dir(self) -> Path:
        """The runs directory (its absolute path)."""
        return self.store.root

    # --- the config pipeline ----------------------------------------------------------

    def preset(self, preset_id: str) -> HardwarePreset | None:
        return self.pipeline.preset(preset_id)

    def preset_choices(self, locale: str = "en") -> list[tuple[str, str]]:
        return self.pipeline.preset_choices(locale)

    def form_for_preset(self, preset_id: str) -> dict[str, Any]:
        return self.pipeline.form_for_preset(preset_id)

    def form_for_dataset(self, name: str, current: Mapping[str, Any]) -> dict[str, Any]:
        """The new run's form the Data tab's "Train on it" opens for registered dataset `name`
        over the form `current`: its preset's defaults for the run settings (the form may hold
        another run's), the dataset's folder, name and stage, and a run name after the dataset
        that no run has (DataDesk.new_run_form)."""
        from backend.config import schema

        defaults = {**schema.form_defaults(), **self.form_for_preset(str(current.get("preset") or ""))}
        return self.data.new_run_form(name, current, defaults, [state.name for state in self.runs()])

    def preset_notes(self, preset_id: str, locale: str = "en") -> str:
        """One line on the preset's hardware, and its notes, in the page's language (escaped:
        a preset file's notes are text anyone who can write presets/ chose)."""
        from backend.view import preset_notes_markdown

        return preset_notes_markdown(self.preset(preset_id), locale)

    def parse(self, form: Mapping[str, Any]) -> tuple[RunConfig, list[Finding], HardwarePreset | None]:
        return self.pipeline.parse(form)

    plan_of = staticmethod(ConfigPipeline.plan_of)
    run_args = staticmethod(ConfigPipeline.run_args)
    shell_lines = staticmethod(ConfigPipeline.shell_lines)

    def llamafactory_findings(self, config: RunConfig, plan: DistributedPlan | None = None) -> list[Finding]:
        return self.pipeline.llamafactory_findings(config, plan)

    def preview(self, form: Mapping[str, Any], ask_llamafactory: bool = True) -> Preview:
        """The YAML, the shell lines and every finding of `form`. Without `ask_llamafactory`
        (checks while the user types) LLaMA-Factory's parser is not run, its known answer kept."""
        return self.pipeline.preview(form, ask_llamafactory)

    def estimate(self, form: Mapping[str, Any]) -> MemoryEstimate:
        return self.pipeline.estimate(form)

    def import_yaml(self, text: str, preset_id: str) -> ImportResult:
        return self.pipeline.import_yaml(text, preset_id)

    def fix_yaml(self, text: str, preset_id: str) -> FixResult:
        return self.pipeline.fix_yaml(text, preset_id)

    def load_into_form(self, text: str, preset_id: str, current: Mapping[str, Any]) -> FormLoad:
        return self.pipeline.load_into_form(text, preset_id, current)

    def start_yaml(self, text: str, preset_id: str, current: Mapping[str, Any], stop_on_nan: bool = False, intent: str = "") -> tuple[FormLoad, StartResult | None]:
        """"Run this YAML as it is": every key of the YAML (the form's fields, the rest in
        Other keys: nothing dropped) through the same checks and launch as a Start. Nothing
        starts while the YAML itself has a problem (its findings say which; None)."""
        load = self.load_into_form(text, preset_id, current)
        if not load.loaded or has_problems(load.findings):
            return load, None
        return load, self.start(load.values, stop_on_nan=stop_on_nan, intent=intent)

    def export(self, form: Mapping[str, Any]) -> tuple[Path, str]:
        return self.pipeline.export(form)

    def prewarm(self, form: Mapping[str, Any] | None = None, then_doctor: bool = False) -> None:
        """Asks LLaMA-Factory's parser about the opening form in the background, so the
        first Start with the defaults does not wait for it; then (optionally) gathers the
        doctor's facts. One after the other: each imports torch in a helper, and two at
        once would slow the first run a user starts."""

        def ask() -> None:
            try:
                self.pipeline.prewarm(form or demo_form())
            except Exception:  # only a warm-up: Start asks again and reports properly
                pass
            if then_doctor:
                self.doctor.gather()
            # LLaMA-Factory's keys and their types, for Other keys: built once per installed
            # version (a helper, ~6 s) when this version has no cache yet; the shipped list
            # of 0.9.5 answers until then.
            try:
                from backend.llama_factory.keys import refresh_catalogue

                refresh_catalogue()
            except Exception:  # the shipped catalogue still answers
                pass

        threading.Thread(target=ask, daemon=True, name="lf-prewarm").start()

    # --- runs ---------------------------------------------------------------------------

    def start(self, form: Mapping[str, Any], stop_on_nan: bool = False, intent: str = "", start_here: bool = True) -> StartResult:
        """Checks the form and launches the trainer (queues it while a run trains here;
        submits it for Slurm); with any problem, creates nothing. `stop_on_nan` is saved with
        the run: the backend stops it when its loss diverges. `intent`: the form the Start
        came from; the same intent twice makes one run (RunManager.start). `start_here`
        False: a local run is only queued, for the app that keeps the queue to start."""
        checked = self.pipeline.check_for_start(form)
        if has_problems(checked.findings):
            return StartResult(None, checked.findings)
        return self.run_manager.start(checked.config, checked.preset, checked.plan, checked.findings, stop_on_nan, checked.placement, intent, start_here)

    def resume(self, run_id: str) -> StartResult:
        return self.run_manager.resume(run_id)

    def stop(self, run_id: str, reason: str = STOPPED_BY_USER, reason_params: dict[str, str] | None = None) -> RunState:
        return self.run_manager.stop(run_id, reason, reason_params)

    def set_stop_on_nan(self, run_id: str, on: bool) -> None:
        self.run_manager.set_stop_on_nan(run_id, on)

    def reattach(self) -> RunState | None:
        return self.run_manager.reattach()

    def delete(self, run_id: str) -> list[Finding]:
        """Deletes a run that is not training; returns why not (nothing when deleted).
        Raises RunNotFound for an id that is not a run."""
        return self.run_manager.delete(run_id)

    def delete_runs(self, run_ids: list[str]) -> list[Finding]:
        """The Runs tab's delete: each run that can be; why not, for the others."""
        return self.run_manager.delete_all(run_ids)

    def active_run(self) -> RunState | None:
        return self.run_manager.active_run()

    def set_node(self, node: Sequence[int] | None, addresses: Mapping[int, str] | None = None) -> None:
        """The GPUs (or CPU slots) local runs train on side by side; None or one: one at a time
        (backend/runs/gpu_slots.py, docs/runs.md). `addresses`: each GPU's PCI address, which
        the node panel shows beside it."""
        self.run_manager.set_node(node, addresses)

    @property
    def side_by_side(self) -> bool:
        """Whether local runs train side by side here (more than one GPU or CPU slot)."""
        return self.run_manager.side_by_side

    def node_markdown(self, locale: str = "en") -> str | None:
        """The Runs tab's node panel (backend/runs/node_words.py): each GPU, the run holding
        it, its VRAM and busy % (the latest reading of that run's sampler), and why each queued
        run waits. None on one slot (no panel). Nothing is started or changed."""
        from backend.runs.node_words import MAX_WAITING_SHOWN, node_markdown, readings_on_node

        node = self.run_manager.node_view()
        if node is None:
            return None
        readings = {}
        for run_id, gpus in node.held.items():
            sampler = self.run_manager.sampler_of(run_id)
            if sampler is not None:
                readings.update(readings_on_node(gpus, sampler.latest()))
        chat_sampler = self.run_manager.chat_sampler
        for gpu in node.chat:
            if chat_sampler is not None and gpu not in readings:
                readings.update(readings_on_node((gpu,), chat_sampler.latest()))
        shown = [*node.held, *node.chat.values(), *(g.run_id for g in node.decision.start), *(w.run_id for w in node.decision.waiting)]
        names = {}
        for run_id in dict.fromkeys(shown[: len(node.held) + len(node.chat) + MAX_WAITING_SHOWN]):
            try:
                names[run_id] = self.store.read_listed(run_id).name
            except (RunNotFound, OSError, ValueError):
                pass
        return node_markdown(node, readings, names, locale)

    def runs(self) -> list[RunState]:
        return self.run_manager.runs()

    def live_runs(self) -> list[RunState]:
        """Every run with something alive: the local one, and each Slurm job pending or running."""
        return self.run_manager.live_runs()

    def is_active(self, run_id: str) -> bool:
        return self.run_manager.is_active(run_id)

    def run_ids(self) -> list[str]:
        return [state.id for state in self.store.list()]

    def run_form(self, run_id: str) -> dict[str, Any] | None:
        """The form a run was started from (every field; defaults where its form.json has
        none), for the page to show beside its charts; None when the run is gone."""
        from backend.config.run_form import read_saved_run

        try:
            self.store.read(run_id)
        except RunNotFound:
            return None
        return read_saved_run(self.store.run_dir(run_id)).form

    def run_to_show(self) -> RunState | None:
        """What a freshly opened tab's Train tab shows: the training run training here, else
        the newest training run. Never an evaluation: the Train tab's charts and form are a
        training's (an evaluation has no loss curve); its scores are on the Evaluate tab."""
        active = self.active_run()
        if active is not None and active.kind == "train":
            return active
        return next((run for run in self.store.list() if run.kind == "train"), None)

    # --- the queue (this machine's) and Slurm's ----------------------------------------------

    def queued_runs(self) -> list[RunState]:
        """The runs waiting for this machine, the next to start first."""
        return self.run_manager.queued_runs()

    def cancel_queued(self, run_id: str) -> list[Finding]:
        return self.run_manager.cancel_queued(run_id)

    def move_queued(self, run_id: str, offset: int) -> bool:
        return self.run_manager.move_queued(run_id, offset)

    def queue_markdown(self, locale: str = "en") -> str:
        """The Runs tab's queue: this machine's queued runs in order, then every Slurm job of a
        run that waits or runs (Slurm is their queue)."""
        from backend.view import queue_markdown

        slurm = [state for state in self.run_manager.live_runs() if not state.local]
        problem = self.run_manager.slurm.problem()
        return queue_markdown(self.active_run(), self.queued_runs(), slurm, locale, problem.detail if problem else "")

    def queue_view(self, locale: str = "en") -> QueueView:
        """The Runs tab's two queues, each with whether it is worth showing: this machine's
        (its buttons only while a run waits in it), and Slurm's (only where Slurm is set up
        here or a run used it)."""
        from backend.view import local_queue_markdown, slurm_queue_markdown

        queued = self.queued_runs()
        slurm = [state for state in self.run_manager.live_runs() if not state.local]
        problem = self.run_manager.slurm.problem()
        slurm_shown = bool(slurm) or self.run_manager.slurm.client.configured() or any(not state.local for state in self.store.list())
        return QueueView(
            local=local_queue_markdown(self.active_run(), queued, locale),
            queued=[state.id for state in queued],
            slurm=slurm_queue_markdown(slurm, locale, problem.detail if problem else "") if slurm_shown else "",
            slurm_shown=slurm_shown,
        )

    def keep_queue(self) -> None:
        """The app looks after the queue on its own while it runs (ui/serve.py)."""
        self.run_manager.keep_queue()

    # --- what a run looks like ------------------------------------------------------------

    def monitor(self, run_id: str) -> RunMonitor:
        return self.monitors.get(run_id)

    def snapshot(self, run_id: str) -> RunSnapshot:
        """The run now. Raises RunNotFound (after stopping its trainer) when it vanished."""
        return self.monitors.snapshot(self.run_manager.refresh(run_id))

    def run_view(self, run_id: str | None, locale: str = "en", shown: tuple | None = None) -> RunView:
        """What the run panel shows of `run_id`; `unchanged` when it is the `shown` version."""
        return panel_view(self.run_manager, self.export_dir, run_id, locale, shown)

    def live(self, run_id: str, locale: str = "en", drawn: str = "") -> LiveAnswer:
        """The watcher's tick (ui/live.py): has `run_id` moved on from the `drawn` version,
        and its charts if so."""
        return live_answer(self.monitors, self.run_manager, run_id, locale, drawn)

    def notices(self, after: int | None, locale: str = "en") -> dict[str, Any]:
        """The words sent since a tab's cursor `after` (runs ended, stalled, sweeps done), in
        `locale`, for its browser notifications (ui/notify.py; backend/notify)."""
        return self.notifier.recent(after, locale)

    def failure_cause(self, run_id: str, locale: str = "en") -> tuple[str, str]:
        """(cause, fix) of a failed run (backend/service/failure.py); empty when unknown."""
        return failure_cause(self.store, self.store.read(run_id), locale)

    def adapter_download(self, run_id: str) -> Path:
        """A servable copy of the run's adapter.zip, in the app's temp export dir
        (artifacts.adapter_download)."""
        return artifacts.adapter_download(self.store.run_dir(run_id), self.export_dir, run_id)

    # --- the doctor ---------------------------------------------------------------------

    def doctor_checks(self, refresh: bool = False) -> list[Check]:
        return self.doctor.checks(refresh)

    def doctor_blockers_markdown(self, preset_id: str, locale: str = "en") -> str:
        """The doctor's problems that would break a run on this preset, for beside Start."""
        from backend.view import doctor_blockers_markdown

        return doctor_blockers_markdown(self.doctor.blockers(self.preset(preset_id)), locale)

    # --- history ------------------------------------------------------------------------

    def history_headers(self, locale: str = "en") -> list[str]:
        from backend.runs.history import history_headers

        return history_headers(locale)

    def history_rows(self, locale: str = "en") -> list[list[Any]]:
        from backend.runs.history import summaries_table, summarize_runs

        self.runs()  # settle runs that ended while nobody watched
        return summaries_table(summarize_runs(self.store), locale)

    def history_table(self, locale: str = "en") -> tuple[list[str], list[list[Any]], list[list[Any]]]:
        """The Runs tab's table (its columns: history.TABLE_COLUMNS): headers, the words each
        cell shows, and the value each cell sorts by."""
        from backend.runs.history import TABLE_COLUMNS, history_headers, summaries_sort_values, summaries_table, summarize_runs

        self.runs()
        summaries = summarize_runs(self.store)
        shown = summaries_table(summaries, locale, TABLE_COLUMNS)
        # Gradio also draws the sort values (a hidden row that sizes the columns): words in
        # the page's language, numbers only where a number sorts differently from its text.
        values = [[word if value is None else value for word, value in zip(row, raw, strict=True)] for row, raw in zip(shown, summaries_sort_values(summaries, TABLE_COLUMNS), strict=True)]
        return history_headers(locale, TABLE_COLUMNS), shown, values

    def run_details(self, run_ids: list[str], locale: str = "en") -> str:
        """The chosen runs' every setting and result, side by side (Markdown; "" for none)."""
        from backend.runs.history import summarize_runs
        from backend.view import run_details_markdown

        return run_details_markdown(summarize_runs(self.store), run_ids, locale) if run_ids else ""

    def overlay_figure(self, run_ids: list[str], locale: str = "en") -> dict:
        from backend.runs.history import overlay_figure

        return overlay_figure(self.store, run_ids, locale=locale)


__all__ = [
    "CATCH_UP_SAMPLE_BYTES",
    "POLL_INTERVAL_S",
    "ConfigPipeline",
    "DoctorCache",
    "LlamaFactoryCheckCache",
    "Monitors",
    "Preview",
    "QueueView",
    "RocBoard",
    "RunDecisions",
    "RunManager",
    "RunMonitor",
    "RunNotFound",
    "RunSnapshot",
    "RunView",
    "StartResult",
    "demo_form",
]
