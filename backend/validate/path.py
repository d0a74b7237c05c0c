"""The validation path: its request (typed, bounded, checked with message ids) and the rungs,
run one after another as real training runs through the app's own RunManager (each appears in
the runs folder like any other run).

Rungs (backend/validate/report.py RUNGS; docs/validate.md says what each proves):
1. one_gpu: the baseline: one process, per-device batch `gpus x b`, accumulation A.
2. n_gpus: `gpus` processes of per-device batch b, accumulation A: the same global batch
   (gpus x b x A), seed and data order (accelerate hands rank r the r-th of each `gpus`
   consecutive batches of the same sampler), so its loss curve must match rung 1's step by
   step within the tolerance (backend/validate/curves.py); measured on two CPU processes on
   gloo: identical to 1e-6.
3. fault_drill: rung 2 again with a checkpoint every `save_steps`; one rank (a real torchrun
   worker found in the run's process tree) is killed with SIGKILL after the drill step; the
   run must end failed with the kill named in its log, leave no process behind, resume from its
   last checkpoint through the run manager's resume, and its curve must continue with no gap,
   no step twice and no jump beyond the tolerance (and match rung 2's).
4. nodes: rung 2 across `nodes` Slurm nodes (the run's placement: the app's Slurm executor),
   one process on each: the same global batch, the same curve as rung 1's.

The path is stoppable at any rung (`stop()`: the rung's run is stopped, the rungs left are
"skipped"), and saves its report after every rung (report.save_report writes atomically), so
a path stopped or crashed leaves a report that says so.

No torch and no gradio here: the runs' trainers are the launcher's child processes.
"""

from __future__ import annotations

import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import psutil

from backend.runs import LOG_FILE, RunNotFound, RunState, RunStore, safe_files
from backend.runs.trainer_log import LiveTrainerLog, log_path, read_curve, read_log_tail
from backend.validate.curves import DEFAULT_TOLERANCE, Continuity, CurveVerdict, compare_curves, continuity
from backend.validate.report import RUNGS, Note, RungResult, ValidationReport, new_report_id

# The bounds of a request: a path of short runs, never a long training.
MAX_STEPS_RANGE = (4, 2000)
CPU_PROCESSES_MAX = 8  # on the CPU each process is a worker on its own core: at most this many
GPUS_MAX = 64
TOLERANCE_RANGE = (1e-6, 1.0)
DEFAULT_RUNGS = ("one_gpu", "n_gpus", "fault_drill")
RUN_WAIT_S = 1800.0  # one rung's run may take this long at most, then it is stopped
POLL_S = 0.05  # the drill watches the log this often (a demo step takes ~50 ms)
LOG_TAIL_BYTES = 256 * 1024  # the end of train.log read to name a failure
EXIT_WAIT_S = 20.0  # after the kill: every process of the run's tree is gone within this


class Trainer(Protocol):
    """What the path needs of the app (RocBoard satisfies it): start a run from a form, resume,
    stop, the run's state now, and the runs folder."""

    store: RunStore

    def start(self, form: Mapping[str, Any], stop_on_nan: bool = False, intent: str = "") -> Any: ...

    def resume(self, run_id: str) -> Any: ...

    def stop(self, run_id: str) -> RunState: ...

    def is_active(self, run_id: str) -> bool: ...


class RequestError(ValueError):
    """A request refused before anything starts: a message id and its params."""

    def __init__(self, message_id: str, **params: Any):
        super().__init__(message_id)
        self.message_id = message_id
        self.params = params

    @property
    def note(self) -> Note:
        return Note(self.message_id, dict(self.params))


@dataclass(frozen=True)
class ValidationRequest:
    """What the user asks; `check()` answers with the first refusal (RequestError)."""

    preset: str = "cpu-demo"
    model: str = ""  # "" : the demo model (backend/demo.py)
    dataset_dir: str = ""  # "" : the demo dataset
    dataset: str = ""
    gpus: int = 2  # processes of rung 2 and the drill (GPUs, or CPU workers on a CPU preset)
    rungs: tuple[str, ...] = DEFAULT_RUNGS
    tolerance: float = DEFAULT_TOLERANCE
    max_steps: int = 24
    # The rank is killed once a step >= drill_step is logged: between two checkpoints (every
    # save_steps), so the resume trains some steps again and they are compared.
    drill_step: int = 10
    save_steps: int = 6
    per_device_batch: int = 1  # b: rung 2's per-device batch (rung 1 runs gpus x b)
    grad_accum: int = 2
    cutoff_len: int = 64
    # A deliberately wrong rung 2 (tests, and to see a failure once): its per-device batch
    # (0: b, the same global batch as rung 1).
    n_gpus_batch: int = 0
    # Rung 1 not run again: this earlier one_gpu run of the same settings is the baseline.
    base_run: str = ""
    # Rung 4: Slurm nodes (one process each) and the partition ("": the cluster's default).
    nodes: int = 2
    slurm_partition: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {name: (list(value) if isinstance(value, tuple) else value) for name, value in self.__dict__.items()}


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError("validate.bad.number", name=name, value=str(value)[:40], low=low, high=high)
    return value


def parse_rungs(text: str | Sequence[str]) -> tuple[str, ...]:
    """`one_gpu,n_gpus` (or a list) -> the rungs in RUNGS order; RequestError for a name that is
    not a rung, or none at all."""
    names = [part.strip() for part in (text.split(",") if isinstance(text, str) else text) if str(part).strip()]
    for name in names:
        if name not in RUNGS:
            raise RequestError("validate.bad.rung", rung=str(name)[:40], rungs=", ".join(RUNGS))
    if not names:
        raise RequestError("validate.bad.no_rungs", rungs=", ".join(RUNGS))
    return tuple(rung for rung in RUNGS if rung in names)


def check_request(request: ValidationRequest, presets: Mapping[str, Any], store: RunStore | None = None, slurm: Callable[[], bool] | None = None) -> ValidationRequest:
    """The request with its defaults filled in (the demo's model and data), or RequestError:
    nothing is made before this passes. `slurm`: whether a Slurm cluster is set up here (the
    nodes rung runs there; the cluster's own preflight then checks its partition and size)."""
    preset = presets.get(request.preset)
    if preset is None:
        raise RequestError("validate.bad.preset", preset=str(request.preset)[:80], presets=", ".join(sorted(presets)))
    rungs = parse_rungs(request.rungs)
    _whole(request.max_steps, "max_steps", *MAX_STEPS_RANGE)
    _whole(request.per_device_batch, "per_device_batch", 1, 64)
    _whole(request.grad_accum, "grad_accum", 1, 64)
    _whole(request.cutoff_len, "cutoff_len", 16, 4096)
    _whole(request.n_gpus_batch, "n_gpus_batch", 0, 64)
    tolerance = request.tolerance
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance) or not TOLERANCE_RANGE[0] <= tolerance <= TOLERANCE_RANGE[1]:
        raise RequestError("validate.bad.tolerance", value=str(request.tolerance)[:40], low=TOLERANCE_RANGE[0], high=TOLERANCE_RANGE[1])
    if isinstance(request.gpus, bool) or not isinstance(request.gpus, int) or request.gpus < 2:
        raise RequestError("validate.bad.gpus_few", gpus=str(request.gpus)[:40])
    if preset.use_cpu:
        # CPU workers: each is one process of its own; more than the cores (or CPU_PROCESSES_MAX)
        # only time-slice one another.
        limit = max(2, min(CPU_PROCESSES_MAX, os.cpu_count() or 2))
        if request.gpus > limit:
            raise RequestError("validate.bad.cpu_processes", gpus=request.gpus, limit=limit, cores=os.cpu_count() or 0)
    else:
        limit = min(GPUS_MAX, int(getattr(preset, "devices_per_node", 1) or 1))
        if request.gpus > limit:
            raise RequestError("validate.bad.gpus_many", gpus=request.gpus, limit=limit, preset=request.preset)
    if "fault_drill" in rungs:
        _whole(request.save_steps, "save_steps", 1, request.max_steps - 2)
        _whole(request.drill_step, "drill_step", 1, request.max_steps - 2)
        if request.drill_step <= request.save_steps:
            raise RequestError("validate.bad.drill_step", drill_step=request.drill_step, save_steps=request.save_steps, max_steps=request.max_steps)
    if ("n_gpus" in rungs or "nodes" in rungs) and "one_gpu" not in rungs and not request.base_run:
        raise RequestError("validate.bad.needs_baseline")
    if "nodes" in rungs:
        _whole(request.nodes, "nodes", 2, 64)
        if (request.gpus * request.per_device_batch) % request.nodes:
            # Rung 1's per-device batch (gpus x b) is shared out over the nodes, one process each.
            raise RequestError("validate.bad.nodes_batch", nodes=request.nodes, batch=request.gpus * request.per_device_batch)
        if not isinstance(request.slurm_partition, str) or len(request.slurm_partition) > 64:
            raise RequestError("validate.bad.number", name="slurm_partition", value=str(request.slurm_partition)[:40], low=0, high=64)
        if slurm is not None and not slurm():
            raise RequestError("validate.bad.no_slurm")
    if request.base_run:
        try:
            known = store is not None and store.read(request.base_run).state == "finished"
        except (RunNotFound, ValueError, OSError):
            known = False
        if not known:
            raise RequestError("validate.bad.base_run", run_id=str(request.base_run)[:80])
    from backend.demo import demo_paths

    demo = demo_paths()
    model = request.model or str(demo.model_dir)
    dataset_dir = request.dataset_dir or str(demo.dataset_dir)
    dataset = request.dataset or (demo.dataset_name if not request.dataset_dir else "")
    if not Path(model).is_dir() or not (Path(model) / "config.json").is_file():
        raise RequestError("validate.bad.model", model=model[:300])
    if not dataset or not (Path(dataset_dir) / "dataset_info.json").is_file():
        raise RequestError("validate.bad.dataset", dataset_dir=dataset_dir[:300], dataset=dataset[:120])
    try:
        import json

        info = json.loads((Path(dataset_dir) / "dataset_info.json").read_text(encoding="utf-8")[:4_000_000])
    except (OSError, ValueError):
        info = None
    if not isinstance(info, dict) or dataset not in info:
        raise RequestError("validate.bad.dataset", dataset_dir=dataset_dir[:300], dataset=dataset[:120])
    return replace(request, model=model, dataset_dir=dataset_dir, dataset=dataset, rungs=rungs)


# --- what the path shows while it runs ------------------------------------------------------


@dataclass
class PathStatus:
    """The path now (a copy is handed out): each rung's state so far, the rung running and its
    run, what it is doing (a message id and params), the report's id once saved."""

    path_id: str
    rungs: dict[str, str]  # rung -> "waiting" | "running" | one of report.STATUSES
    current: str | None = None
    run_id: str | None = None
    progress: Note = field(default_factory=lambda: Note("validate.progress.waiting", {}))
    report_id: str | None = None
    done: bool = False
    error: Note | None = None  # the path itself broke (never a rung's fail)


class Stopped(Exception):
    """The path was asked to stop."""


# --- measuring a run -------------------------------------------------------------------------


def _curve(store: RunStore, run_id: str) -> list[tuple[int, float]]:
    run_dir = store.run_dir(run_id)
    return [(p.step, p.loss) for p in read_curve(log_path(run_dir), run_dir) if p.loss is not None]


def run_figures(store: RunStore, run_id: str) -> dict[str, float | int | str]:
    """final_loss, tokens_per_s and steps_per_s (LLaMA-Factory's own count: tokens seen by
    every rank over the training's time), steps, the trainer's wall time, and the VRAM peak
    per GPU where the run's samples hold one ("-" on the CPU: there is no VRAM to read)."""
    run_dir = store.run_dir(run_id)
    points = read_curve(log_path(run_dir), run_dir)
    figures: dict[str, float | int | str] = {}
    losses = [p for p in points if p.loss is not None]
    if losses:
        figures["final_loss"] = round(losses[-1].loss or 0.0, 6)
        figures["steps"] = losses[-1].step
    timed = [p for p in points if p.throughput and p.total_tokens]
    if timed:
        last = timed[-1]
        figures["tokens_per_s"] = round(last.throughput or 0.0, 2)
        figures["steps_per_s"] = round((last.throughput or 0.0) * last.step / (last.total_tokens or 1), 3)
    state = store.read(run_id)
    if state.started_at and state.ended_at:
        figures["trainer_s"] = round(state.ended_at - state.started_at, 2)
    figures["vram_peak_mib_per_gpu"] = vram_peaks(store, run_id) or "-"
    return figures


def vram_peaks(store: RunStore, run_id: str) -> str:
    """`0:1234,1:1220` (MiB) from the run's telemetry samples (one backend.telemetry Reading a
    line, written by the sampler while a run trains here); "" when it has none of a GPU (the
    CPU: the "process" source is the trainer's RAM, not VRAM)."""
    import json

    from backend.runs import SAMPLES_FILE

    try:
        data = safe_files.read_tail(store.run_dir(run_id), SAMPLES_FILE, 4 * 1024 * 1024)
    except (OSError, ValueError):
        return ""
    peaks: dict[str, int] = {}
    for line in data.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("source") == "process":
            continue
        gpu, used = record.get("gpu"), record.get("used_bytes")
        if isinstance(gpu, bool) or not isinstance(gpu, int) or isinstance(used, bool) or not isinstance(used, int):
            continue
        key = f"{record.get('node')}/{gpu}" if record.get("node") else str(gpu)
        peaks[key] = max(peaks.get(key, 0), used)
    return ",".join(f"{key}:{round(used / 2**20)}" for key, used in sorted(peaks.items()))


def global_batch(store: RunStore, run_id: str) -> int | None:
    """per-device batch x processes x accumulation, from the run's saved form."""
    from backend.config.run_form import read_saved_run

    try:
        # The saved form holds every field (the schema's default where none was saved).
        form = read_saved_run(store.run_dir(run_id)).form
        # A Slurm run's nodes are the placement's (its plan's dist_nnodes is Slurm's to decide).
        nodes = int(form["slurm_nodes"]) if form["run_on"] == "slurm" else int(form["dist_nnodes"])
        return int(form["batch_size"]) * int(form["grad_accum"]) * int(form["dist_nproc"]) * nodes
    except (OSError, ValueError, KeyError, TypeError):
        return None


_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*exitcode\s*:\s*-9\b")


def killed_ranks(log_text: str) -> list[int]:
    """The ranks torchrun's failure report says were ended by SIGKILL (exitcode -9)."""
    return sorted({int(m.group(1)) for m in _FAILED_RANK.finditer(log_text)})


def _log_text(store: RunStore, run_id: str) -> str:
    try:
        return safe_files.read_tail(store.run_dir(run_id), LOG_FILE, LOG_TAIL_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def failure_causes(store: RunStore, run_id: str) -> tuple[Note, ...]:
    """A failed run's named cause and fix: RocBoard's diagnosis of its log, with the RCCL fixes
    where a collective timed out."""
    from backend.diagnose import diagnose

    state = store.read(run_id)
    notes = [Note("validate.cause.run_failed", {"run_id": run_id, "exit_code": str(state.exit_code)})]
    found = diagnose(_log_text(store, run_id), state.exit_code)
    if found:
        rule = found[0].rule
        notes += [Note(f"diagnose.{rule}.cause", {}), Note(f"diagnose.{rule}.fix", {})]
        if rule == "collective_timeout":
            notes.append(Note("validate.fix.rccl", {}))
    return tuple(notes)


# --- the path ------------------------------------------------------------------------------


class ValidationPath:
    """One path: `run()` (on the caller's thread) runs the rungs asked and returns the report;
    `stop()` from any thread stops it at the rung it is at. `save` is report.save_report."""

    def __init__(
        self,
        trainer: Trainer,
        request: ValidationRequest,
        machine: dict[str, str],
        save: Callable[[Path, ValidationReport], Any],
        path_id: str | None = None,
        clock: Callable[[], float] = time.time,
        data_fingerprint: Callable[[list[Path]], str | None] | None = None,
    ):
        self.trainer = trainer
        self.store = trainer.store
        self.request = request
        self.machine = machine
        self.save = save
        self.path_id = path_id or new_report_id()
        self.clock = clock
        self._stop = threading.Event()
        # The report's data fingerprint (report.fingerprint.path_data_fingerprint): asked once,
        # after the first rung that made a run (every rung trains on the same data).
        self._data_fingerprint_of = data_fingerprint
        self.data_fingerprint: str | None = None
        self._fingerprint_asked = False
        self._lock = threading.Lock()
        self._status = PathStatus(self.path_id, {rung: "waiting" for rung in request.rungs})
        self.results: list[RungResult] = []
        self.created_at = clock()
        self.overhead: dict[str, float] = {}  # rung -> RocBoard's own seconds (wall - trainers')
        self._attempt_s: dict[tuple[str, float], float] = {}  # (rung, an attempt's start) -> its trainer's seconds

    # --- status and stop ---------------------------------------------------------

    def status(self) -> PathStatus:
        with self._lock:
            return replace(self._status, rungs=dict(self._status.rungs))

    def _set(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self._status, name, value)

    def _progress(self, message_id: str, **params: Any) -> None:
        self._set(progress=Note(message_id, params))

    def stop(self) -> None:
        self._stop.set()
        run_id = self.status().run_id
        if run_id is not None:
            try:
                self.trainer.stop(run_id)
            except (RunNotFound, OSError):
                pass

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- the report --------------------------------------------------------------

    def report(self) -> ValidationReport:
        return ValidationReport(
            id=self.path_id,
            created_at=self.created_at,
            request=self.request.to_dict(),
            rungs=tuple(self.results),
            machine=dict(self.machine),
            data_fingerprint=self.data_fingerprint,
        )

    def _save(self) -> None:
        self.save(self.store.root, self.report())
        self._set(report_id=self.path_id)

    # --- running -----------------------------------------------------------------

    def run(self) -> ValidationReport:
        baseline: list[tuple[int, float]] | None = None
        baseline_run: str | None = self.request.base_run or None
        if baseline_run:
            baseline = _curve(self.store, baseline_run)
        rung2: list[tuple[int, float]] | None = None
        try:
            for rung in self.request.rungs:
                if self.stopping:
                    self._finish(RungResult(rung, "skipped", causes=(Note("validate.note.path_stopped", {}),)))
                    continue
                self._set(current=rung, run_id=None)
                self._rung_state(rung, "running")
                started = self.clock()
                try:
                    if rung == "one_gpu":
                        result = self._one_gpu()
                        if result.status == "pass" and result.run_ids:
                            baseline, baseline_run = list(result.curve), result.run_ids[0]
                    elif rung == "n_gpus":
                        result = self._n_gpus(baseline, baseline_run)
                        if result.run_ids:
                            rung2 = list(result.curve)
                    elif rung == "fault_drill":
                        result = self._fault_drill(rung2 or baseline)
                    else:
                        result = self._nodes(baseline, baseline_run)
                except Stopped:
                    result = RungResult(rung, "stopped", run_ids=self._runs_of(rung), causes=(Note("validate.note.path_stopped", {}),))
                wall = self.clock() - started
                trainers = sum(seconds for (rung_of, _), seconds in self._attempt_s.items() if rung_of == rung)
                self.overhead[rung] = round(max(0.0, wall - trainers), 2)
                figures = {**result.figures, "rung_wall_s": round(wall, 2), "rocboard_overhead_s": self.overhead[rung]}
                self._finish(replace(result, figures=figures))
        except BaseException as error:  # the path broke: the report says so, then it is raised
            self._set(error=Note("validate.progress.broke", {"error": f"{type(error).__name__}: {error}"[:300]}))
            current = self.status().current
            if current is not None and current not in {r.rung for r in self.results}:
                self.results.append(RungResult(current, "stopped", run_ids=self._runs_of(current), causes=(Note("validate.progress.broke", {"error": f"{type(error).__name__}: {error}"[:300]}),)))
                self._rung_state(current, "stopped")
            self._save()
            self._set(done=True, current=None, run_id=None)
            raise
        self._set(current=None, run_id=None, done=True)
        passed = sum(r.status == "pass" for r in self.results)
        self._progress("validate.progress.stopped" if self.stopping else "validate.progress.done", passed=passed, rungs=len(self.results))
        return self.report()

    _made: dict[str, list[str]]

    def _runs_of(self, rung: str) -> tuple[str, ...]:
        return tuple(getattr(self, "_made", {}).get(rung, ()))

    def _rung_state(self, rung: str, state: str) -> None:
        with self._lock:
            self._status.rungs[rung] = state

    def _finish(self, result: RungResult) -> None:
        self.results.append(result)
        if result.run_ids and not self._fingerprint_asked and self._data_fingerprint_of is not None and not self.stopping:
            self._fingerprint_asked = True
            try:
                self.data_fingerprint = self._data_fingerprint_of([self.store.run_dir(run_id) for run_id in result.run_ids])
            except Exception:  # noqa: BLE001 - a report without it beats no report
                self.data_fingerprint = None
        self._rung_state(result.rung, result.status)
        self._save()

    # --- the runs ------------------------------------------------------------------

    def _form(self, name: str, processes: int, batch: int, save_steps: int) -> dict[str, Any]:
        from backend.config.presets import demo_form

        request = self.request
        form = {
            **demo_form(),
            **self._preset_form(),
            "model_path": request.model,
            "dataset_dir": request.dataset_dir,
            "dataset": request.dataset,
            "run_name": name,
            "max_steps": request.max_steps,
            "logging_steps": 1,
            "save_steps": save_steps,
            "cutoff_len": request.cutoff_len,
            "batch_size": batch,
            "grad_accum": request.grad_accum,
            "dist_nproc": processes,
        }
        if processes > 1 and not self._on_cpu():
            form["dist_gpus"] = ",".join(str(i) for i in range(processes))
        return form

    def _preset_form(self) -> dict[str, Any]:
        from backend.config.presets import load_presets

        presets, _ = load_presets()
        preset = presets.get(self.request.preset)
        return {"preset": self.request.preset, **(preset.form_values() if preset is not None else {})}

    def _on_cpu(self) -> bool:
        from backend.config.presets import load_presets

        presets, _ = load_presets()
        preset = presets.get(self.request.preset)
        return bool(preset is not None and preset.use_cpu)

    def _start(self, rung: str, form: dict[str, Any]) -> str:
        result = self.trainer.start(form)
        if not result.started:
            problems = [f for f in result.findings if f.severity == "problem"]
            first = problems[0] if problems else None
            raise _StartRefused(first.rule if first is not None else "unknown", first.key if first is not None else "")
        run_id: str = result.run.id
        if not hasattr(self, "_made"):
            self._made = {}
        self._made.setdefault(rung, []).append(run_id)
        self._set(run_id=run_id)
        return run_id

    def _wait(self, rung: str, run_id: str, watch: Callable[[], bool] | None = None) -> RunState:
        """Until the run ends (or `watch` says to stop watching: True); Stopped when the path
        is stopped (the run is stopped first)."""
        deadline = self.clock() + RUN_WAIT_S
        run_dir = self.store.run_dir(run_id)
        while True:
            if self.stopping:
                try:
                    self.trainer.stop(run_id)
                except RunNotFound:
                    pass
                raise Stopped
            active = self.trainer.is_active(run_id)  # settles a run whose trainer ended
            state = self.store.read(run_id)
            if not active:
                if state.started_at and state.ended_at:  # this attempt's trainer time, once
                    self._attempt_s[(rung, state.started_at)] = state.ended_at - state.started_at
                return state
            if watch is not None and watch():
                return state
            tail = read_log_tail(log_path(run_dir), run_dir, loss=False)
            self._progress("validate.progress.training", rung=rung, run_id=run_id, step=tail.step or 0, total=tail.total_steps or self.request.max_steps)
            if self.clock() > deadline:
                self.trainer.stop(run_id)
                return self.store.read(run_id)
            time.sleep(POLL_S if watch is not None else 0.25)

    def _ended(self, rung: str, run_id: str) -> RunState:
        self._progress("validate.progress.starting", rung=rung, run_id=run_id)
        return self._wait(rung, run_id)

    def _one_gpu(self) -> RungResult:
        request = self.request
        try:
            run_id = self._start("one_gpu", self._form("validate-one-gpu", 1, request.gpus * request.per_device_batch, request.max_steps + 1))
        except _StartRefused as refused:
            return RungResult("one_gpu", "fail", causes=(refused.note,))
        state = self._ended("one_gpu", run_id)
        curve = _curve(self.store, run_id)
        figures = {**run_figures(self.store, run_id), "global_batch": global_batch(self.store, run_id) or 0, "processes": 1}
        if state.state != "finished":
            return RungResult("one_gpu", "fail", (run_id,), figures, failure_causes(self.store, run_id), tuple(curve[:5000]))
        return RungResult("one_gpu", "pass", (run_id,), figures, (), tuple(curve[:5000]))

    def _n_gpus(self, baseline: list[tuple[int, float]] | None, baseline_run: str | None) -> RungResult:
        request = self.request
        form = self._form(f"validate-{request.gpus}-gpus", request.gpus, request.n_gpus_batch or request.per_device_batch, request.max_steps + 1)
        return self._against_baseline("n_gpus", form, request.gpus, baseline, baseline_run)

    def _nodes(self, baseline: list[tuple[int, float]] | None, baseline_run: str | None) -> RungResult:
        """Rung 2 across `nodes` Slurm nodes, one process each: the same global batch."""
        request = self.request
        batch = request.gpus * request.per_device_batch // request.nodes  # rung 1's global batch again
        form = self._form(f"validate-{request.nodes}-nodes", 1, batch, request.max_steps + 1)
        form.update(run_on="slurm", slurm_nodes=request.nodes, slurm_partition=request.slurm_partition)
        return self._against_baseline("nodes", form, request.nodes, baseline, baseline_run)

    def _against_baseline(self, rung: str, form: dict[str, Any], processes: int, baseline: list[tuple[int, float]] | None, baseline_run: str | None) -> RungResult:
        """A run of `processes` in all whose curve must match the baseline's step by step."""
        request = self.request
        if baseline is None or baseline_run is None:
            return RungResult(rung, "skipped", causes=(Note("validate.note.no_baseline", {}),))
        try:
            run_id = self._start(rung, form)
        except _StartRefused as refused:
            return RungResult(rung, "fail", causes=(refused.note,))
        state = self._ended(rung, run_id)
        curve = _curve(self.store, run_id)
        base_figures = run_figures(self.store, baseline_run)
        figures: dict[str, float | int | str] = {**run_figures(self.store, run_id), "processes": processes}
        one, many = global_batch(self.store, baseline_run), global_batch(self.store, run_id)
        figures["global_batch"] = many or 0
        figures["baseline_global_batch"] = one or 0
        tps_one, tps_many = base_figures.get("tokens_per_s"), figures.get("tokens_per_s")
        if isinstance(tps_one, (int, float)) and isinstance(tps_many, (int, float)) and tps_one > 0:
            figures["scaling_efficiency"] = round(tps_many / (processes * tps_one), 3)
        if state.state != "finished":
            return RungResult(rung, "fail", (run_id,), figures, failure_causes(self.store, run_id), tuple(curve[:5000]))
        verdict = compare_curves(baseline, curve, request.tolerance)
        figures.update(max_loss_gap=float(f"{verdict.max_gap:.3g}"), steps_compared=verdict.compared, tolerance=request.tolerance)
        if verdict.first_beyond is not None:
            figures["first_step_beyond"] = verdict.first_beyond
        causes: list[Note] = []
        if not verdict.ok:
            causes.append(_mismatch(verdict))
            if one is not None and many is not None and one != many:
                causes.append(Note("validate.cause.global_batch", {"one": one, "many": many, "processes": processes}))
            else:
                causes.append(Note("validate.cause.precision", {}))
        imbalance = _imbalance(str(figures.get("vram_peak_mib_per_gpu", "")))
        if imbalance is not None:
            figures["vram_imbalance"] = imbalance
            if imbalance > 0.25:
                causes.append(Note("validate.cause.imbalance", {"spread": f"{imbalance:.0%}"}))
        return RungResult(rung, "pass" if not causes else "fail", (run_id,), figures, tuple(causes), tuple(curve[:5000]))

    def _fault_drill(self, reference: list[tuple[int, float]] | None) -> RungResult:
        request = self.request
        name = "validate-fault-drill"
        try:
            run_id = self._start("fault_drill", self._form(name, request.gpus, request.per_device_batch, request.save_steps))
        except _StartRefused as refused:
            return RungResult("fault_drill", "fail", causes=(refused.note,))
        run_dir = self.store.run_dir(run_id)
        figures: dict[str, float | int | str] = {"processes": request.gpus, "drill_step": request.drill_step}

        def reached() -> bool:
            tail = read_log_tail(log_path(run_dir), run_dir, loss=False)
            return tail.step is not None and tail.step >= request.drill_step

        self._progress("validate.progress.drill_waiting", run_id=run_id, step=request.drill_step)
        state = self._wait("fault_drill", run_id, watch=reached)
        if not state.active:
            cause = failure_causes(self.store, run_id) if state.state != "finished" else (Note("validate.cause.drill_missed", {"step": request.drill_step}),)
            return RungResult("fault_drill", "fail", (run_id,), figures, cause, tuple(_curve(self.store, run_id)[:5000]))
        killed = self._kill_a_rank(state)
        if killed is None:
            self.trainer.stop(run_id)
            return RungResult("fault_drill", "fail", (run_id,), figures, (Note("validate.cause.no_worker", {"run_id": run_id}),))
        killed_at = read_log_tail(log_path(run_dir), run_dir, loss=False).step or 0
        figures["killed_at_step"] = killed_at
        self._progress("validate.progress.drill_killed", run_id=run_id, step=killed_at)
        tree, _rank = killed
        state = self._wait("fault_drill", run_id)
        left = _survivors(tree)
        figures["processes_left"] = len(left)
        causes: list[Note] = []
        log_text = _log_text(self.store, run_id)
        ranks = killed_ranks(log_text)
        from backend.diagnose import diagnose

        named = [d.rule for d in diagnose(log_text, state.exit_code)]
        figures["failure_named"] = named[0] if named else "-"
        figures["killed_rank"] = ",".join(map(str, ranks)) or "-"
        if state.state != "failed":
            causes.append(Note("validate.cause.kill_not_seen", {"run_id": run_id, "state": state.state}))
        elif not ranks or not named:
            causes.append(Note("validate.cause.kill_not_named", {"run_id": run_id}))
        if left:
            causes.append(Note("validate.cause.processes_left", {"count": len(left), "pids": ",".join(map(str, left[:10]))}))
        if causes:
            return RungResult("fault_drill", "fail", (run_id,), figures, tuple(causes), tuple(_curve(self.store, run_id)[:5000]))
        self._progress("validate.progress.drill_resuming", run_id=run_id)
        resumed = self.trainer.resume(run_id)
        if not resumed.started:
            first = next((f for f in resumed.findings if f.severity == "problem"), None)
            return RungResult("fault_drill", "fail", (run_id,), figures, (Note("validate.cause.resume_refused", {"run_id": run_id, "rule": first.rule if first else "-"}),))
        state = self._wait("fault_drill", run_id)
        curve = _curve(self.store, run_id)
        figures.update(run_figures(self.store, run_id))
        if state.state != "finished":
            return RungResult("fault_drill", "fail", (run_id,), figures, failure_causes(self.store, run_id), tuple(curve[:5000]))
        records = [item for batch in LiveTrainerLog(run_dir, sample_above=64 * 1024 * 1024, tail_bytes=1024 * 1024).poll() for item in batch]
        check = continuity(records, request.tolerance)
        figures.update(resumed_from_step=check.resumed_from[-1] if check.resumed_from else -1, retrained_steps=check.retrained, max_resume_jump=float(f"{check.jump:.3g}"), tolerance=request.tolerance)
        if not check.resumed_from:
            causes.append(Note("validate.cause.not_resumed", {"run_id": run_id}))
        if not check.ok:
            causes.append(_discontinuous(check))
        if reference:
            verdict = compare_curves(reference, curve, request.tolerance)
            figures["max_loss_gap"] = float(f"{verdict.max_gap:.3g}")
            if not verdict.ok:
                causes.append(_mismatch(verdict))
        return RungResult("fault_drill", "pass" if not causes else "fail", (run_id,), figures, tuple(causes), tuple(curve[:5000]))

    def _kill_a_rank(self, state: RunState) -> tuple[list[psutil.Process], int] | None:
        """SIGKILLs the torchrun worker of the highest local rank in the run's process tree;
        (the tree as it was, the rank), or None when no worker was found."""
        if state.pid is None:
            return None
        try:
            root = psutil.Process(state.pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return None
        workers: list[tuple[int, psutil.Process]] = []
        for process in tree:
            try:
                if any("torchrun" in part for part in process.cmdline()[:3]):
                    for child in process.children():
                        try:
                            rank = int(child.environ().get("LOCAL_RANK", "-1"))
                        except (psutil.Error, ValueError):
                            rank = -1
                        workers.append((rank, child))
            except psutil.Error:
                continue
        if not workers:
            return None
        rank, victim = max(workers, key=lambda pair: pair[0])
        try:
            victim.send_signal(signal.SIGKILL)
        except psutil.Error:
            return None
        return tree, rank


def _mismatch(verdict: CurveVerdict) -> Note:
    """A curve beyond the tolerance (or with steps missing or logged twice), as a cause."""
    return Note(
        "validate.cause.curve_mismatch",
        {
            "step": verdict.first_beyond if verdict.first_beyond is not None else "-",
            "gap": f"{verdict.max_gap:.3g}",
            "tolerance": verdict.tolerance,
            "missing": verdict.missing_count,
            "duplicates": verdict.duplicate_count,
        },
    )


def _discontinuous(check: Continuity) -> Note:
    return Note(
        "validate.cause.discontinuous",
        {
            "gaps": ",".join(map(str, check.gaps)) or "-",
            "duplicates": ",".join(map(str, check.duplicates)) or "-",
            "jump": f"{check.jump:.3g}",
            "step": check.beyond if check.beyond is not None else "-",
        },
    )


class _StartRefused(Exception):
    def __init__(self, rule: str, key: str):
        super().__init__(rule)
        self.note = Note("validate.cause.start_refused", {"rule": rule, "key": key})


def _survivors(tree: list[psutil.Process]) -> list[int]:
    deadline = time.monotonic() + EXIT_WAIT_S
    while True:
        alive = []
        for process in tree:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process.pid)
            except psutil.NoSuchProcess:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _imbalance(peaks: str) -> float | None:
    """(max - min) / max of the per-GPU VRAM peaks "0:123,1:120"; None with fewer than two."""
    values = []
    for part in peaks.split(","):
        _, _, value = part.partition(":")
        try:
            values.append(float(value))
        except ValueError:
            continue
    if len(values) < 2 or max(values) <= 0:
        return None
    return round((max(values) - min(values)) / max(values), 3)


__all__ = [
    "DEFAULT_RUNGS",
    "PathStatus",
    "RequestError",
    "Trainer",
    "ValidationPath",
    "ValidationRequest",
    "check_request",
    "failure_causes",
    "global_batch",
    "killed_ranks",
    "parse_rungs",
    "run_figures",
]
