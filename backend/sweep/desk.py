"""Sweeps of a runs directory: plan one (its runs and their cost, nothing made), create it (every
run queued through the page's own Start, or none), show it ranked, stop it, add runs to it.

The runs go through `RocBoard.start`, the path of the page's Start: each is checked as a
Start is (LLaMA-Factory's parser included) and then started, queued behind the run training
here, or submitted to Slurm, as its form's placement says; how many train at once is the
run manager's decision, not the sweep's. Nothing half-made: every run's form is checked
before the first is made, and if a start still fails (the disk, a race) the runs already
made are stopped or taken out of the queue and deleted before the refusal is raised; the
record is written only once every run exists.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from backend.config import shown
from backend.config.estimate import MemoryEstimate
from backend.config.presets import HardwarePreset
from backend.findings import Finding, has_problems
from backend.i18n import Message
from backend.runs import RunState, RunStore
from backend.sweep.record import SweepMember, SweepNotFound, SweepRecord, list_sweeps, locked, new_sweep_id, now, read_record, record_times, write_record
from backend.sweep.spec import Axis, SweepRefused, SweepRun, SweepSpec, expand, expand_added, sanitize, typed_axes
from backend.sweep.view import DEFAULT_METRIC, METRICS, Losing, SweepRow, best_run, curve_figures, eval_points, losing_runs, rank

log = logging.getLogger(__name__)
EARLY_STOP_MAX_EVALS = 1000
EARLY_STOP_MAX_MARGIN = 10.0
ENDED_STATES = frozenset({"finished", "failed", "stopped", "deleted"})


@dataclass(frozen=True)
class RunCost:
    name: str
    values: tuple[tuple[str, Any], ...]
    device_bytes: int  # the estimate's peak per device
    vram_bytes: int | None  # of one device of the preset (None on the CPU)
    gpus: int  # GPUs the run asks for (0 on the CPU)
    verdict: str


@dataclass(frozen=True)
class SweepPlan:
    runs: tuple[SweepRun, ...]
    costs: tuple[RunCost, ...]

    @property
    def total_gpus(self) -> int:
        return sum(cost.gpus for cost in self.costs)

    @property
    def total_device_bytes(self) -> int:
        return sum(cost.device_bytes * max(1, cost.gpus) for cost in self.costs)


@dataclass(frozen=True)
class SweepView:
    record: SweepRecord
    metric: str
    rows: tuple[SweepRow, ...]  # ranked, best first
    best_run_id: str
    finished: bool  # every run has ended
    overlay: dict  # the loss curves, one line per run (plotly figure dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.record.id,
            "name": self.record.name,
            "metric": self.metric,
            "best_run": self.best_run_id,
            "finished": self.finished,
            "runs": [row.to_json() for row in self.rows],
        }


class Board(Protocol):
    """What a sweep needs of the RocBoard (backend/service) whose Start its runs go through: a
    protocol, as the facade holds this desk (importing its type back would make a cycle)."""

    store: RunStore
    pipeline: Any
    run_manager: Any

    def start(self, form: Mapping[str, Any], stop_on_nan: bool = False, intent: str = "") -> Any: ...

    def stop(self, run_id: str, reason: str = ..., reason_params: dict[str, str] | None = None) -> RunState: ...

    def delete(self, run_id: str) -> list[Finding]: ...

    def cancel_queued(self, run_id: str) -> list[Finding]: ...

    def estimate(self, form: Mapping[str, Any]) -> MemoryEstimate: ...

    def preset(self, preset_id: str) -> HardwarePreset | None: ...


class SweepStartRefused(SweepRefused):
    """A run of the sweep was refused: its findings say why (nothing of the sweep was kept)."""

    def __init__(self, message: Message, findings: list[Finding]):
        super().__init__(message)
        self.findings = findings


def _prefix(base_form: Mapping[str, Any], name: str) -> str:
    return sanitize(name or str(base_form.get("run_name") or "") or "sweep")


class SweepDesk:
    """The sweeps of one RocBoard's runs directory."""

    def __init__(self, board: Board):
        self.board = board
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # sweep id -> its record's mtime when it was seen ended: look_after skips it until the
        # record changes (runs added to it, here or by another process)
        self._ended: dict[str, int] = {}

    @property
    def root(self):
        return self.board.store.root

    # --- before anything starts ----------------------------------------------------------

    def plan(self, spec: SweepSpec, base_form: Mapping[str, Any], name: str = "", taken: tuple[str, ...] = ()) -> SweepPlan:
        """The runs `spec` makes over `base_form` and what each costs; nothing is made.
        SweepRefused for a spec out of bounds or a value its field refuses."""
        runs = expand(spec, base_form, _prefix(base_form, name), taken)
        return SweepPlan(tuple(runs), tuple(self._cost(run) for run in runs))

    def _cost(self, run: SweepRun) -> RunCost:
        pipeline = self.board.pipeline
        estimate = self.board.estimate(run.form)
        preset = self.board.preset(str(run.form.get("preset", "")))
        return RunCost(run.name, run.values, estimate.total_bytes, estimate.vram_bytes, _gpus(pipeline, run.form, preset), str(estimate.verdict))

    # --- making it -------------------------------------------------------------------------

    def create(
        self, spec: SweepSpec, base_form: Mapping[str, Any], name: str = "", metric: str = DEFAULT_METRIC, stop_on_nan: bool = False, early_stop: tuple[int, float] | None = None
    ) -> SweepRecord:
        """Every run of the sweep queued (or started, or submitted), and its record; or, with
        SweepRefused, nothing at all. `early_stop`: (K eval points, margin) of the rule in
        backend/sweep/view.py, applied while this process follows the sweep; None: off."""
        if metric not in METRICS:
            raise SweepRefused(Message("sweep.unknown-metric", metric=metric, metrics=", ".join(METRICS)))
        if early_stop is not None:
            after, margin = early_stop
            if not (1 <= after <= EARLY_STOP_MAX_EVALS and 0 <= margin <= EARLY_STOP_MAX_MARGIN):
                raise SweepRefused(Message("sweep.bad-early-stop", after=shown(after), margin=shown(margin), max_evals=EARLY_STOP_MAX_EVALS, max_margin=EARLY_STOP_MAX_MARGIN))
        runs = expand(spec, base_form, _prefix(base_form, name))
        sweep_id = new_sweep_id()
        members = self._start_all(sweep_id, runs, stop_on_nan)
        record = SweepRecord(
            sweep_id,
            _prefix(base_form, name),
            datetime.now(UTC).isoformat(timespec="seconds"),
            tuple((axis.field, axis.values) for axis in spec.axes),
            spec.seeds,
            dict(base_form),
            tuple(members),
            metric,
            early_stop=early_stop,
        )
        try:
            with self._lock, locked(self.root):
                write_record(self.root, record)
        except Exception:
            self._roll_back([m.run_id for m in members])
            raise
        return record

    def plan_added(self, sweep_id: str, axes: Sequence[Axis]) -> SweepPlan:
        """The runs adding `axes`' values to the sweep makes, and their cost; nothing is made.
        SweepNotFound for no such sweep; SweepRefused for a field it does not vary, a value
        it has already, or more than MAX_RUNS runs in all."""
        record = read_record(self.root, sweep_id)
        runs, _ = expand_added(record.axes, record.seeds, tuple(axes), record.base_form, record.name, tuple(m.name for m in record.runs), len(record.runs))
        return SweepPlan(tuple(runs), tuple(self._cost(run) for run in runs))

    def add_runs(self, sweep_id: str, axes: Sequence[Axis], stop_on_nan: bool = False) -> SweepRecord:
        """Values added to fields the sweep varies: the grid's new points started like the
        others, over the sweep's own base form (names unique among its runs), or none of them
        (the refusals of plan_added)."""
        record = read_record(self.root, sweep_id)
        runs, grown = expand_added(record.axes, record.seeds, tuple(axes), record.base_form, record.name, tuple(m.name for m in record.runs), len(record.runs))
        members = self._start_all(sweep_id, runs, stop_on_nan)
        with self._lock, locked(self.root):
            record = read_record(self.root, sweep_id)
            # The grid grown, its values as form values (values another process added meanwhile kept).
            axes_after = dict(typed_axes(record.axes, record.base_form))
            for field, values in grown:
                axes_after[field] = tuple(dict.fromkeys((*axes_after.get(field, ()), *values)))
            updated = replace(record, axes=tuple(axes_after.items()), runs=(*record.runs, *members), finished_at=None)
            try:
                write_record(self.root, updated)
            except Exception:
                self._roll_back([m.run_id for m in members])
                raise
        return updated

    def _start_all(self, sweep_id: str, runs: list[SweepRun], stop_on_nan: bool) -> list[SweepMember]:
        # Every form checked first: the form's own checks of all of them (fast), then
        # LLaMA-Factory's parser of each (its answers are kept by exact arguments, so each
        # Start below finds its answer ready).
        for ask in (False, True):
            for run in runs:
                checked = self.board.pipeline.check_for_start(run.form, ask_llamafactory=ask)
                if has_problems(checked.findings):
                    raise SweepStartRefused(Message("sweep.run-refused", run=run.name), checked.findings)
        members: list[SweepMember] = []
        try:
            for run in runs:
                result = self.board.start(run.form, stop_on_nan=stop_on_nan, intent=f"{sweep_id}:{run.name}")
                if result.run is None:
                    raise SweepStartRefused(Message("sweep.run-refused", run=run.name), result.findings)
                members.append(SweepMember(result.run.id, run.name, run.values))
        except BaseException:
            self._roll_back([m.run_id for m in members])
            raise
        return members

    def _roll_back(self, run_ids: list[str]) -> None:
        """The runs made so far, gone: the queued taken out first (so none starts when the
        running one stops), then the running stopped, then every one deleted."""
        for run_id in reversed(run_ids):
            try:
                state = self.board.run_manager.refresh(run_id)
                if state.alive:
                    self.board.stop(run_id)
                self.board.delete(run_id)
            except Exception:  # keep going: the others must go too
                log.exception("rolling back sweep run %s", run_id)

    # --- what it looks like ----------------------------------------------------------------

    def sweeps(self) -> list[str]:
        return list_sweeps(self.root)

    def record(self, sweep_id: str) -> SweepRecord:
        return read_record(self.root, sweep_id)

    def view(self, sweep_id: str, metric: str = "", locale: str = "en") -> SweepView:
        """The sweep's runs ranked by `metric` (its record's when empty), each with its values,
        state, step, losses, scores, tokens/s and time; the best run; the loss curves."""
        from backend.runs import RunNotFound
        from backend.runs.history import overlay_figure, summarize_runs
        from backend.runs.trainer_log import log_path, read_curve

        record = read_record(self.root, sweep_id)
        metric = metric or record.metric
        if metric not in METRICS:
            raise SweepRefused(Message("sweep.unknown-metric", metric=metric, metrics=", ".join(METRICS)))
        summaries = {s.id: s for s in summarize_runs(self.board.store)}
        rows: list[SweepRow] = []
        for member in record.runs:
            try:
                state = self.board.run_manager.refresh(member.run_id)
            except RunNotFound:
                rows.append(SweepRow(member.run_id, member.name, member.values, "deleted"))
                continue
            run_dir = self.board.store.run_dir(member.run_id)
            figures = curve_figures(read_curve(log_path(run_dir), run_dir))
            summary = summaries.get(member.run_id)
            scores = summary.scores if summary else None
            rows.append(
                SweepRow(
                    member.run_id,
                    member.name,
                    member.values,
                    state.state,
                    summary.step if summary else None,
                    summary.total_steps if summary else None,
                    figures["final_loss"],
                    figures["final_eval_loss"],
                    figures["best_eval_loss"],
                    tuple((k, getattr(scores, k, None)) for k in ("bleu4", "rouge1", "rouge2", "rougel")) if scores else (),
                    figures["tokens_per_s"],
                    summary.duration_s if summary else None,
                )
            )
        ranked = rank(rows, metric)
        finished = bool(rows) and all(row.state in ENDED_STATES for row in rows)
        best = best_run(ranked, metric)
        overlay = overlay_figure(self.board.store, [row.run_id for row in ranked if row.state != "deleted"], locale=locale)
        return SweepView(record, metric, tuple(ranked), best, finished, overlay)

    def _finished(self, record: SweepRecord, best: str, metric: str, ranked: list[SweepRow]) -> None:
        """Its last run has ended: recorded once, and said (the notifier, where there is one).
        Only look_after (an app's queue keeper, or `app.py sweep --wait`'s) calls it: a view
        (`app.py status --sweep`, a command with no webhook) never takes the word from the app."""
        with self._lock, locked(self.root):
            current = read_record(self.root, record.id)
            if current.finished_at is not None:
                return  # recorded (and said) already, by this process or another
            write_record(self.root, replace(current, finished_at=now()))
        # backend/notify (issue 30 section 3) may not be there yet: looked up, not imported.
        notifier = getattr(self.board, "notifier", None)
        if notifier is None:
            return
        try:
            from backend.notify import RunEvent  # type: ignore[import-not-found,unused-ignore]  # another helper's module, landing beside this one

            top = next((row for row in ranked if row.run_id == best), None)
            states = [row.state for row in ranked]
            figures = {"runs": len(ranked), "finished": states.count("finished"), "metric": metric, "best_run": best, "best_value": top.metric(metric) if top else None}
            notifier.send(RunEvent("sweep_finished", best, "finished", "", {}, figures, sweep_id=record.id, run_name=top.name if top else ""))
        except Exception:  # a notice never breaks the sweep
            log.exception("telling that sweep %s ended", record.id)

    def look_after(self) -> None:
        """One look at every sweep not yet ended, whoever made it (the page, `app.py sweep` in
        another shell): its early-stop rule applied, and its end, once every run has ended,
        recorded and said, once (the record's finished_at, under the sweeps' lock, keeps a
        restarted app or a second process from saying it again). The app's queue keeper calls
        it on each of its turns (RocBoard.keep_queue), so no tab and no waiting command is
        needed."""
        if self._closed.is_set():
            return
        for sweep_id, changed in record_times(self.root).items():
            if self._ended.get(sweep_id) == changed:
                continue
            try:
                record = read_record(self.root, sweep_id)
                if record.finished_at is None:
                    self.stop_losing(sweep_id)
                    if not self._all_ended(record):
                        continue
                    shown = self.view(sweep_id)
                    if not shown.finished:
                        continue
                    self._finished(shown.record, shown.best_run_id, shown.metric, list(shown.rows))
                    changed = record_times(self.root).get(sweep_id, changed)  # its record was just written
                self._ended[sweep_id] = changed
            except SweepNotFound:
                continue
            except Exception:  # one sweep's trouble does not keep the others from being looked after
                log.exception("looking after sweep %s", sweep_id)

    def _all_ended(self, record: SweepRecord) -> bool:
        from backend.runs import RunNotFound

        for member in record.runs:
            try:
                if self.board.run_manager.refresh(member.run_id).state not in ENDED_STATES:
                    return False
            except RunNotFound:
                continue
        return bool(record.runs)

    def stop_losing(self, sweep_id: str) -> list[Losing]:
        """Stops the sweep's clearly losing runs (its early-stop rule, when it has one), each
        with its reason (reason.sweep_losing: the step, its eval loss, the median)."""
        from backend.runs import RunNotFound
        from backend.runs.trainer_log import log_path, read_curve

        record = read_record(self.root, sweep_id)
        if record.early_stop is None:
            return []
        evals: dict[str, dict[int, float]] = {}
        training: set[str] = set()
        for member in record.runs:
            try:
                state = self.board.run_manager.refresh(member.run_id)
            except RunNotFound:
                continue
            run_dir = self.board.store.run_dir(member.run_id)
            evals[member.run_id] = eval_points(read_curve(log_path(run_dir), run_dir))
            if state.state == "running":
                training.add(member.run_id)
        losing = losing_runs(evals, training, *record.early_stop)
        for item in losing:
            # The trainer's end is recorded with this reason by whichever thread sees the end.
            params = {"step": str(item.step), "loss": f"{item.eval_loss:.4g}", "median": f"{item.median:.4g}"}
            self.board.stop(item.run_id, "reason.sweep_losing", params)
        return losing

    def close(self) -> None:
        self._closed.set()

    # --- acting on it ------------------------------------------------------------------------

    def cancel_rest(self, sweep_id: str) -> list[str]:
        """Takes the sweep's queued runs out of the queue; the ids cancelled."""
        record = read_record(self.root, sweep_id)
        cancelled = []
        for member in record.runs:
            try:
                if self.board.run_manager.refresh(member.run_id).state == "queued" and not self.board.cancel_queued(member.run_id):
                    cancelled.append(member.run_id)
            except Exception:
                log.exception("cancelling sweep run %s", member.run_id)
        return cancelled

    def stop_all(self, sweep_id: str) -> list[str]:
        """The queued runs cancelled first (none starts as the running stop), then every run
        still alive stopped (each saves, as the page's Stop); the ids stopped or cancelled."""
        done = self.cancel_rest(sweep_id)
        for member in read_record(self.root, sweep_id).runs:
            try:
                if self.board.run_manager.refresh(member.run_id).alive:
                    self.board.stop(member.run_id)
                    done.append(member.run_id)
            except Exception:
                log.exception("stopping sweep run %s", member.run_id)
        return done


def _max_runs() -> int:
    from backend.sweep.spec import MAX_RUNS

    return MAX_RUNS


def _gpus(pipeline: Any, form: Mapping[str, Any], preset: HardwarePreset | None) -> int:
    """The GPUs a run asks for: Slurm's nodes x GPUs per node; here, the plan's workers on a
    GPU preset (one for a plain run), none on the CPU."""
    from backend.config.placement import SlurmPlacement

    placement, _ = pipeline.placement_of(form, preset)
    if isinstance(placement, SlurmPlacement):
        return placement.nodes * placement.gpus_per_node
    if preset is None or preset.use_cpu:
        return 0
    plan, _ = pipeline.plan_of(form, preset)
    return plan.world_size if plan is not None and not plan.on_cpu else 1


__all__ = ["Axis", "RunCost", "SweepDesk", "SweepPlan", "SweepStartRefused", "SweepView"]
