"""RocBoard's backend facade: what the page (and the tests) call.

It ties the parts together: form values -> typed config -> checks -> run directory ->
launcher; and run directory -> incremental readers -> snapshots for the page. Shared
state lives here, once per app, not per browser tab: ten tabs watching one run share
one set of readers and one telemetry sampler.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

from backend import artifacts, safe_files
from backend.charts import MemorySeries
from backend.config import FORM_DEFAULTS, RunConfig, parse_form, to_form, to_llamafactory_args
from backend.findings import Finding, has_problems
from backend.launcher import Launcher, ProcessIdentity, stop_tree
from backend.logs import TRAINER_LOG, JsonlTail, MetricPoint, MetricSeries, TextTail, parse_metric, parse_trainer_print
from backend.presets import DEFAULT_PRESET_ID, PRESETS_DIR, HardwarePreset, PresetLoadError, load_presets
from backend.runs import CONFIG_FILE, FORM_FILE, LOG_FILE, OUTPUT_DIR, SAMPLES_FILE, RunNotFound, RunState, RunStore
from backend.telemetry.base import Reading

# LLaMA-Factory's answers by exact arguments, shared by every board of the process.
_LF_CACHE: dict[str, list[Finding]] = {}
_LF_LOCK = threading.Lock()
_LF_PENDING: dict[str, threading.Lock] = {}

# How often one run's files are re-read at most, however many tabs ask.
POLL_INTERVAL_S = 0.5
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class Preview:
    yaml_text: str
    command: str  # the shell lines a user could run by hand
    findings: list[Finding]
    config: RunConfig | None


@dataclass(frozen=True)
class StartResult:
    run: RunState | None
    findings: list[Finding]

    @property
    def started(self) -> bool:
        return self.run is not None


@dataclass(frozen=True)
class RunSnapshot:
    run: RunState
    points: list[MetricPoint]
    memory: list[MemorySeries]
    memory_label: str
    log_tail: str
    has_adapter: bool
    garbage_lines: int
    alert: str | None  # NaN/inf loss or exploding gradients, said at once
    version: tuple  # changes whenever anything the page shows changes


def demo_form() -> dict[str, Any]:
    """The form as `make run` opens it: the CPU demo preset on the tiny offline model."""
    from backend.demo import demo_paths

    paths = demo_paths()
    return {
        **FORM_DEFAULTS,
        "preset": DEFAULT_PRESET_ID,
        "model_path": str(paths.model_dir),
        "template": "llama3",
        "dataset_dir": str(paths.dataset_dir),
        "dataset": paths.dataset_name,
        "lora_rank": 8,
        "lora_alpha": 16,
        # Measured on the demo: 100 steps take ~2 s of training on a quiet CPU, and the loss
        # falls from ~5.6 to ~2.3 (the fixed "who are you" answer is learned word for word).
        "learning_rate": 1e-2,
        "max_steps": 100,
        "num_train_epochs": 1.0,
        "batch_size": 8,
        "grad_accum": 1,
        "cutoff_len": 128,
        "precision": "fp32",
        "flash_attn": "disabled",
        "gradient_checkpointing": False,
        "logging_steps": 1,
        "save_steps": 50,
        "run_name": "demo",
    }


# What a monitor keeps of a run, however long its files grow (see backend/logs.py for the
# curve): the grad norms the alert looks at, and telemetry readings per series.
MAX_GRAD_NORMS = 1_000
MAX_READINGS = 20_000
# A trainer log longer than this, met on a monitor's first poll (a long run opened after a
# restart), is caught up by sampling all but its last CATCH_UP_TAIL_BYTES, which are read
# line by line: the page shows the whole curve at once, never after minutes of polls.
CATCH_UP_SAMPLE_BYTES = 32 * 1024 * 1024
CATCH_UP_TAIL_BYTES = 4 * 1024 * 1024


class RunMonitor:
    """Incremental view of one run's files; polled by every tab, reads at most every 0.5 s.

    Every file is opened inside the run without following links; each poll reads a bounded
    number of bytes per file, and what is kept is bounded too (points, grad norms, readings)."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.metrics_tail = JsonlTail(run_dir / OUTPUT_DIR / TRAINER_LOG, run_dir=run_dir)
        self.samples_tail = JsonlTail(run_dir / SAMPLES_FILE, run_dir=run_dir)
        self.console_tail = TextTail(run_dir / LOG_FILE, run_dir=run_dir)  # for grad_norm, which only train.log has
        self.grad_norms: list[float] = []
        self.series = MetricSeries()
        self.memory: dict[tuple[str, int], MemorySeries] = {}
        self.memory_label = ""
        self.first_sample_at: float | None = None
        self.counter = 0  # bumps whenever new points or readings arrive
        self._last_poll = 0.0
        self._lock = threading.Lock()

    def poll(self) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last_poll < POLL_INTERVAL_S:
                return
            self._last_poll = now
            changed = self._catch_up_by_sampling()
            points = [p for p in map(parse_metric, self.metrics_tail.poll()) if p is not None]
            changed = self.series.extend(points) or changed
            for line in self.console_tail.poll():
                printed = parse_trainer_print(line)
                if printed is not None and "grad_norm" in printed:
                    self.grad_norms.append(printed["grad_norm"])
                    changed = True
            if len(self.grad_norms) > MAX_GRAD_NORMS:
                del self.grad_norms[: len(self.grad_norms) - MAX_GRAD_NORMS]
            for record in self.samples_tail.poll():
                try:
                    reading = Reading.from_json(record)
                except TypeError:
                    continue
                self._add_reading(reading)
                changed = True
            if changed:
                self.counter += 1

    def _catch_up_by_sampling(self) -> bool:
        """On the first poll of a very long trainer log: its curve up to near the end from
        evenly spaced windows (bounded reads), then line by line from there."""
        tail = self.metrics_tail
        if tail.offset or tail._identity is not None:
            return False
        size = tail.size()
        if size is None or size <= CATCH_UP_SAMPLE_BYTES:
            return False
        from backend.history import CURVE_WINDOW_BYTES, CURVE_WINDOWS
        from backend.logs import parse_records, sampled_lines

        boundary = size - CATCH_UP_TAIL_BYTES
        changed = False
        try:
            with safe_files.opened(self.run_dir, tail.relative) as handle:
                for lines in sampled_lines(handle, 0, boundary, CURVE_WINDOWS, CURVE_WINDOW_BYTES):
                    changed = self.series.extend([p for p in map(parse_metric, parse_records(lines).records) if p is not None]) or changed
        except OSError:
            return False
        tail.skip_to_line_after(boundary)
        return changed

    def alert(self) -> str | None:
        from backend.diagnose import loss_alert

        recent = self.series.points[-50:]
        loss = loss_alert([{"step": p.step, "loss": p.loss} for p in recent if p.loss is not None])
        if loss is not None:
            return loss
        start = max(0, len(self.grad_norms) - 200)
        return loss_alert([{"grad_norm": g} for g in self.grad_norms[start:]])

    def _add_reading(self, reading: Reading) -> None:
        if self.first_sample_at is None:
            self.first_sample_at = reading.at
        key = (reading.source, reading.gpu)
        series = self.memory.get(key)
        if series is None:
            label = reading.label or (f"GPU {reading.gpu}" if reading.source != "process" else "training process")
            series = self.memory[key] = MemorySeries(reading.gpu, label)
        series.add(
            reading.at - self.first_sample_at,
            reading.used_bytes,
            reading.total_bytes,
            reading.util_pct,
            reading.temp_c,
            reading.power_w,
            reading.source,
        )
        if len(series.times) > MAX_READINGS:
            # Halve the older readings; the latest stay (the table shows them).
            for column in (series.times, series.used_gib, series.total_gib):
                column[: MAX_READINGS // 2] = column[: MAX_READINGS // 2 : 2]
        self.memory_label = (
            "CPU RAM of the training process" if reading.source == "process" else f"GPU memory ({reading.source})"
        )


def _log_tail(run_dir: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 64_000) -> str:
    """The last lines of the run's train.log, read from its end (the log can be large),
    opened inside the run without following a link (a planted link shows nothing)."""
    try:
        data = safe_files.read_tail(run_dir, LOG_FILE, max_bytes)
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    kept = [line for line in text.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


class RocBoard:
    """One per app: runs directory, presets, launcher, telemetry sampler, run monitors."""

    def __init__(self, runs_dir: Path, presets_dir: Path = PRESETS_DIR, sampler: Any = None, export_dir: Path | None = None):
        self.store = RunStore(Path(runs_dir))
        self.store.ensure_root()
        self.presets: dict[str, HardwarePreset]
        self.preset_errors: list[PresetLoadError]
        self.presets, self.preset_errors = load_presets(presets_dir)
        self.launcher = Launcher(self.store)
        self.sampler = sampler
        # Downloads are served from a copy in the system temp dir: Gradio serves files the
        # app returns from there, and nothing else of the runs directory is ever exposed.
        self.export_dir = export_dir or Path(tempfile.mkdtemp(prefix="rocboard-exports-"))
        self.export_dir.mkdir(parents=True, exist_ok=True)
        self._monitors: dict[str, RunMonitor] = {}
        self._start_lock = threading.Lock()
        self._watched: str | None = None
        self._last_seen: dict[str, RunState] = {}  # to stop a trainer whose run directory vanished
        self._doctor_checks: list[Any] | None = None

        self._doctor_error = ""

    # --- presets and form ------------------------------------------------------------

    def preset(self, preset_id: str) -> HardwarePreset | None:
        return self.presets.get(preset_id)

    def preset_choices(self) -> list[tuple[str, str]]:
        return [(p.display_name, p.id) for p in self.presets.values()]

    def form_for_preset(self, preset_id: str) -> dict[str, Any]:
        preset = self.preset(preset_id)
        return preset.form_values() if preset else {}

    def parse(self, form: Mapping[str, Any]) -> tuple[RunConfig, list[Finding], HardwarePreset | None]:
        preset = self.preset(str(form.get("preset", "")))
        findings: list[Finding] = []
        if preset is None:
            findings.append(
                Finding("preset", f"Unknown hardware preset {form.get('preset')!r}.", "Pick a preset from the list.", rule="unknown-preset")
            )
        config, form_findings = parse_form(form, preset_env=preset.env if preset else (), use_cpu=bool(preset and preset.use_cpu))
        findings += form_findings
        findings += self._check(config, preset)
        findings += self.plan_of(form, preset)[1]
        return config, findings, preset

    @staticmethod
    def plan_of(form: Mapping[str, Any], preset: HardwarePreset | None) -> tuple[Any, list[Finding]]:
        """The multi-GPU / multi-node plan the form asks for: None for one process."""
        from backend.distributed import parse_plan_form

        plan, findings = parse_plan_form(form, on_cpu=bool(preset and preset.use_cpu))
        if plan.nproc <= 1 and plan.nnodes <= 1:
            # One process needs no plan, but a refused value (dist_nproc=100000 falls back to
            # its default of 1) must still reach the page rather than vanish with the plan.
            return None, [f for f in findings if f.severity == "problem"]
        return plan, findings

    @staticmethod
    def run_args(config: RunConfig, plan: Any, output_dir: Path | str) -> dict[str, Any]:
        """The YAML's arguments: the config's, plus the launch plan's (ddp_timeout, deepspeed)."""
        from backend.distributed import extra_args

        args = to_llamafactory_args(config, output_dir)
        if plan is not None:
            args.update(extra_args(plan))
        return args

    def _check(self, config: RunConfig, preset: HardwarePreset | None) -> list[Finding]:
        from backend.checks import check_config, check_output_dir

        return check_config(config, preset) + check_output_dir(self.store.root)

    def llamafactory_findings(self, config: RunConfig, plan: Any = None) -> list[Finding]:
        """LLaMA-Factory's own parser on the config: the last word on which keys and values
        exist. It runs in a helper process (7-10 s: it imports torch), so answers are cached
        by the exact arguments; the demo's are asked for at start-up (see prewarm)."""
        from backend.lf_check import check_with_llamafactory

        args = self.run_args(config, plan, "output")
        key = json.dumps(args, sort_keys=True, default=str)
        with _LF_LOCK:
            cached = _LF_CACHE.get(key)
            # One helper per config: a Start during the start-up prewarm (or a second tab)
            # waits for the answer already being computed instead of paying for it again.
            pending = _LF_PENDING.setdefault(key, threading.Lock()) if cached is None else None
        if pending is not None:
            with pending:
                with _LF_LOCK:
                    cached = _LF_CACHE.get(key)
                if cached is None:
                    cached = check_with_llamafactory(args)
                    with _LF_LOCK:
                        if len(_LF_CACHE) > 256:
                            _LF_CACHE.clear()
                        _LF_CACHE[key] = cached
                        _LF_PENDING.pop(key, None)
        return list(cached)

    def prewarm(self, form: Mapping[str, Any] | None = None, then_doctor: bool = False) -> None:
        """Asks LLaMA-Factory's parser about the opening form in the background, so the
        first Start with the defaults does not wait for it; then (optionally) gathers the
        doctor's facts. One after the other: each imports torch in a helper, and two at
        once would slow the first run a user starts."""

        def ask() -> None:
            try:
                config, findings, _ = self.parse(form or demo_form())
                if not has_problems(findings):
                    self.llamafactory_findings(config)
            except Exception:  # only a warm-up: Start asks again and reports properly
                pass
            if then_doctor:
                self._gather_doctor()

        threading.Thread(target=ask, daemon=True, name="lf-prewarm").start()

    def preview(self, form: Mapping[str, Any]) -> Preview:
        import yaml

        config, findings, preset = self.parse(form)
        plan, _ = self.plan_of(form, preset)
        if not has_problems(findings):
            findings = findings + self.llamafactory_findings(config, plan)
        output_dir = self.store.root / "<run-id>" / OUTPUT_DIR
        command = self.shell_lines(config, preset)
        if plan is not None:
            from backend.distributed import describe, node_commands

            lines = node_commands(plan, CONFIG_FILE, extra_env=dict(preset.env) if preset else None)
            command = f"# {describe(plan)}\n" + "\n".join(
                f"# node {rank}\n{line}" for rank, line in enumerate(lines)
            )
        return Preview(
            yaml_text=yaml.safe_dump(self.run_args(config, plan, output_dir), sort_keys=False, allow_unicode=True),
            command=command,
            findings=findings,
            config=config,
        )

    @staticmethod
    def shell_lines(config: RunConfig, preset: HardwarePreset | None) -> str:
        from backend.export import export_shell

        return export_shell(config, preset, CONFIG_FILE)

    # --- estimate, import, export ---------------------------------------------------

    def estimate(self, form: Mapping[str, Any]):
        """Peak memory per device for the form's config on its preset."""
        from backend.estimate import estimate_memory

        config, _, preset = self.parse(form)
        return estimate_memory(config, preset)

    def import_yaml(self, text: str, preset_id: str):
        """Findings and form values of a pasted or uploaded LLaMA-Factory YAML."""
        from backend.yaml_import import import_yaml

        return import_yaml(text or "", self.preset(preset_id))

    def fix_yaml(self, text: str, preset_id: str) -> tuple[str, Any]:
        """The YAML with every mechanical fix applied, and what is still wrong with it."""
        from backend.yaml_import import apply_fixes, dump_yaml

        result = self.import_yaml(text, preset_id)
        if not result.args:
            return text, result
        fixed = text
        # One fix can uncover the next (bf16 and fp16 both on -> bf16 on a card without it):
        # apply until nothing mechanical is left, a few rounds at most.
        for _ in range(4):
            if not result.fixable:
                break
            fixed = dump_yaml(apply_fixes(result.args, result.findings))
            result = self.import_yaml(fixed, preset_id)
        return fixed, result

    def export(self, form: Mapping[str, Any]) -> tuple[Path, str]:
        """A YAML file to download (in the temp export dir) and the shell lines that run it."""
        from backend.export import default_filenames, export_shell, export_yaml

        config, _, preset = self.parse(form)
        yaml_name, _ = default_filenames(config)
        target_dir = Path(tempfile.mkdtemp(prefix="yaml-", dir=self.export_dir))
        path = target_dir / yaml_name
        path.write_text(export_yaml(config, f"saves/{config.run_name or 'run'}"), encoding="utf-8")
        return path, export_shell(config, preset, yaml_name)

    # --- runs ------------------------------------------------------------------------

    def active_run(self) -> RunState | None:
        for state in self.store.list():
            if state.active:
                state = self.launcher.refresh(state.id)
                if state.active:
                    return state
        return None

    def start(self, form: Mapping[str, Any]) -> StartResult:
        """Checks the form and launches the trainer; with any problem, creates nothing."""
        config, findings, preset = self.parse(form)
        if has_problems(findings):
            return StartResult(None, findings)
        plan, _ = self.plan_of(form, preset)
        findings = findings + self.llamafactory_findings(config, plan)
        if has_problems(findings):
            return StartResult(None, findings)
        with self._start_lock:  # a double-click launches exactly one run
            active = self.active_run()
            if active is not None:
                return StartResult(
                    None,
                    findings
                    + [
                        Finding(
                            "start",
                            f"Run {active.id} is still {active.state}; RocBoard trains one run at a time.",
                            "Wait for it to finish, or stop it first.",
                            rule="run-active",
                        )
                    ],
                )
            return StartResult(self._launch(config, preset, plan), findings)

    def _launch(self, config: RunConfig, preset: HardwarePreset | None, plan: Any = None) -> RunState:
        import yaml

        from backend.distributed import deepspeed_files, free_port, launch_env, plan_to_form

        if plan is not None and plan.nnodes == 1:
            plan = replace(plan, master_port=free_port())
        run_id = self.store.new_run_id(config.run_name)
        output_dir = self.store.root / run_id / OUTPUT_DIR
        form = {**to_form(config), **(plan_to_form(plan) if plan is not None else {})}
        state = self.store.create(
            name=config.run_name,
            preset=config.hardware.preset,
            model=config.model.model_name_or_path,
            files={
                CONFIG_FILE: yaml.safe_dump(self.run_args(config, plan, output_dir), sort_keys=False, allow_unicode=True),
                FORM_FILE: json.dumps(form, indent=2),
                LOG_FILE: "",
                **(deepspeed_files(plan) if plan is not None else {}),
            },
            run_id=run_id,
        )
        env = dict(config.hardware.env)
        if plan is not None:
            env.update(launch_env(plan))
        state = self.launcher.start(state.id, env)
        self._watch(state)
        return state

    def _watch(self, state: RunState) -> None:
        if self.sampler is None:
            return
        self._watched = state.id
        self.sampler.watch(self.store.run_dir(state.id) / SAMPLES_FILE, state.pid)

    def _unwatch_if(self, run_id: str) -> None:
        if self.sampler is not None and self._watched == run_id:
            self._watched = None
            self.sampler.watch(None, None)

    def stop(self, run_id: str) -> RunState:
        state = self.launcher.stop(run_id)
        self._unwatch_if(run_id)
        return state

    def reattach(self) -> RunState | None:
        """After a restart: follow the run that is still training, settle the ones that ended."""
        active = self.active_run()
        if active is not None:
            self._watch(active)
        return active

    def _run_vanished(self, run_id: str) -> None:
        """The run's directory was deleted by hand while the app ran. Its trainer can no
        longer be seen, stopped from the page, or counted by the one-run-at-a-time rule, and
        it writes into a directory nobody reads: stop it (by pid and start time)."""
        self._monitors.pop(run_id, None)
        self._unwatch_if(run_id)
        last = self._last_seen.pop(run_id, None)
        if last is not None and last.active and last.pid is not None and last.pid_started is not None:
            stop_tree(ProcessIdentity(last.pid, last.pid_started))

    def monitor(self, run_id: str) -> RunMonitor:
        monitor = self._monitors.get(run_id)
        if monitor is None:
            monitor = self._monitors[run_id] = RunMonitor(self.store.run_dir(run_id))
        return monitor

    def snapshot(self, run_id: str) -> RunSnapshot:
        try:
            state = self.launcher.refresh(run_id)
        except RunNotFound:
            self._run_vanished(run_id)
            raise
        self._last_seen[run_id] = state
        if not state.active:
            self._unwatch_if(run_id)
        monitor = self.monitor(run_id)
        monitor.poll()
        run_dir = self.store.run_dir(run_id)
        log_tail = "" if state.active else _log_tail(run_dir)
        adapter = artifacts.has_adapter(run_dir)
        alert = monitor.alert()
        return RunSnapshot(
            run=state,
            points=list(monitor.series.points),
            memory=list(monitor.memory.values()),
            memory_label=monitor.memory_label,
            log_tail=log_tail,
            has_adapter=adapter,
            garbage_lines=monitor.metrics_tail.garbage_lines,
            alert=alert,
            version=(state.state, state.exit_code, monitor.counter, adapter, state.stop_reason),
        )

    def adapter_download(self, run_id: str) -> Path:
        """A servable copy of the run's adapter.zip (in the app's temp export dir).

        A copy, not a hard link: a rename between two names of one file does nothing, so a
        linked temp name would stay behind and break the next view. The copy is made under
        an unpredictable temp name and renamed over the last one; when the last copy is
        already of this archive (same size and mtime), it is served again as it is."""
        run_dir = self.store.run_dir(run_id)
        artifacts.build_adapter_zip(run_dir)
        target_dir = self.export_dir / run_id
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / f"{run_id}-adapter.zip"
        with safe_files.opened(run_dir, artifacts.ADAPTER_ZIP) as source:
            found = os.fstat(source.fileno())
            try:
                copied = os.lstat(target)
                if stat.S_ISREG(copied.st_mode) and (copied.st_size, copied.st_mtime_ns) == (found.st_size, found.st_mtime_ns):
                    return target
            except OSError:
                pass
            fd, partial = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target_dir)
            try:
                with os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(source, out, 1024 * 1024)
                os.utime(partial, ns=(found.st_atime_ns, found.st_mtime_ns))
                os.replace(partial, target)
            except BaseException:
                Path(partial).unlink(missing_ok=True)
                raise
        return target

    def run_to_show(self) -> RunState | None:
        """What a freshly opened tab shows: the active run, else the newest one."""
        active = self.active_run()
        if active is not None:
            return active
        runs = self.store.list()
        return runs[0] if runs else None

    def failure_cause(self, run_id: str, locale: str = "en") -> tuple[str, str]:
        """(cause, fix) of a failed run, read from its train.log; empty when unknown."""
        from backend.diagnose import summarize_failure
        from backend.i18n import translate

        state = self.store.read(run_id)
        text = _log_tail(self.store.run_dir(run_id), lines=400, max_bytes=400_000)
        top = summarize_failure(text, state.exit_code).diagnosis
        if top is None:
            return "", ""
        cause_key, fix_key = f"diagnose.{top.rule}.cause", f"diagnose.{top.rule}.fix"
        cause, fix = translate(cause_key, locale), translate(fix_key, locale)
        return (top.cause if cause == cause_key else cause, top.fix if fix == fix_key else fix)

    def resume(self, run_id: str) -> StartResult:
        """Continues a stopped or failed run from its latest complete checkpoint."""
        from backend.resume import Refusal, prepare_resume, resume_plan

        with self._start_lock:
            active = self.active_run()
            if active is not None:
                return StartResult(None, [Finding("resume", f"Run {active.id} is still {active.state}.", "Wait for it to end, or stop it first.", rule="run-active")])
            plan = resume_plan(self.store, run_id)
            if isinstance(plan, Refusal):
                return StartResult(None, [Finding("resume", plan.problem, plan.fix, rule="resume-refused")])
            form = self.store.read_form(run_id)
            preset = self.preset(str(form.get("preset", "")))
            env = dict(preset.env) if preset else {}
            plan, plan_findings = self.plan_of(form, preset)
            # A form.json edited by hand (or written before a rule existed) is checked like
            # the page's form: a refused RCCL line stops the resume before anything changes.
            if has_problems(plan_findings):
                return StartResult(None, plan_findings)
            prepare_resume(self.store, run_id)
            if plan is not None:
                from backend.distributed import launch_env

                env.update(launch_env(plan))
            state = self.launcher.start(run_id, env)
            self._monitors.pop(run_id, None)  # re-read the whole curve, resumed steps included
            self._watch(state)
            return StartResult(state, [])

    def stop_for_alert(self, run_id: str) -> RunSnapshot:
        """Stops a run whose loss went NaN/inf (the user opted in), saying why."""
        self.launcher.stop(run_id)
        self.store.update(run_id, stop_reason="Stopped on NaN/inf loss (stop on NaN is on).")
        self._unwatch_if(run_id)
        return self.snapshot(run_id)

    def preset_notes(self, preset_id: str, locale: str = "en") -> str:
        """One line on the preset's hardware, and its notes, in the page's language (escaped:
        a preset file's notes are text anyone who can write presets/ chose)."""
        from backend.view import preset_notes_markdown

        return preset_notes_markdown(self.preset(preset_id), locale)

    # --- the doctor, gathered once in the background -----------------------------------

    def start_doctor(self) -> None:
        """Gathers the machine's facts on a thread (the torch probe takes seconds)."""
        threading.Thread(target=self._gather_doctor, daemon=True, name="doctor").start()

    def _gather_doctor(self) -> None:
        from backend.doctor import gather_facts, run_checks

        try:
            self._doctor_checks = run_checks(gather_facts())
        except Exception as error:  # a broken probe must not take the app down
            self._doctor_error = str(error)

    def doctor_checks(self, refresh: bool = False) -> list[Any]:
        if refresh or self._doctor_checks is None:
            from backend.doctor import gather_facts, run_checks

            self._doctor_checks = run_checks(gather_facts())
        return self._doctor_checks

    def doctor_blockers_markdown(self, preset_id: str) -> str:
        """The doctor's problems that would break a run on this preset, for beside Start."""
        if self._doctor_checks is None:
            return ""
        from backend.doctor import blocking_problems

        preset = self.preset(preset_id)
        blockers = blocking_problems(self._doctor_checks, use_cpu=bool(preset and preset.use_cpu))
        from backend.view import doctor_blockers_markdown

        return doctor_blockers_markdown(blockers)

    # --- history -------------------------------------------------------------------

    def history_headers(self) -> list[str]:
        from backend.history import HISTORY_HEADERS

        return list(HISTORY_HEADERS)

    def history_rows(self) -> list[list[Any]]:
        from backend.history import summaries_table, summarize_runs

        self.runs()  # settle runs that ended while nobody watched
        return summaries_table(summarize_runs(self.store))

    def run_ids(self) -> list[str]:
        return [state.id for state in self.store.list()]

    def overlay_figure(self, run_ids: list[str]) -> dict:
        from backend.history import overlay_figure

        return overlay_figure(self.store, run_ids)

    def is_active(self, run_id: str) -> bool:
        try:
            return self.launcher.refresh(run_id).active
        except RunNotFound:
            return False

    def delete_run(self, run_id: str) -> str:
        """Deletes a run that is not training; returns why not, or ""."""
        try:
            self.delete(run_id)
        except (RunNotFound, RuntimeError) as error:
            return str(error)
        return ""

    def runs(self) -> list[RunState]:
        return [self.launcher.refresh(s.id) if s.active else s for s in self.store.list()]

    def delete(self, run_id: str) -> None:
        state = self.store.read(run_id)
        if state.active:
            raise RuntimeError(f"run {run_id} is {state.state}: stop it before deleting it")
        self._monitors.pop(run_id, None)
        self.store.delete(run_id)


__all__ = ["Preview", "RocBoard", "RunMonitor", "RunNotFound", "RunSnapshot", "StartResult", "demo_form"]
