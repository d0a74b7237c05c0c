"""The run manager: start, stop, resume, re-attach and delete runs, under one lock.

It owns the rule "one run at a time" (a double-click, or two tabs, launch exactly one run),
the telemetry sampler's attention (it samples the run that trains), and the end of a run
whose directory vanished (its trainer is stopped: nobody could see or stop it any more).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from backend.config import RunConfig
from backend.findings import Finding, has_problems
from backend.runs.launcher import Launcher, ProcessIdentity, stop_tree
from backend.config.presets import HardwarePreset
from backend.runs import CONFIG_FILE, FORM_FILE, LOG_FILE, OUTPUT_DIR, SAMPLES_FILE, RunNotFound, RunState, RunStore
from backend.service.monitors import Monitors
from backend.service.pipeline import ConfigPipeline

if TYPE_CHECKING:
    from backend.config.distributed import DistributedPlan
    from backend.telemetry.sampler import Sampler


@dataclass(frozen=True)
class StartResult:
    run: RunState | None
    findings: list[Finding]

    @property
    def started(self) -> bool:
        return self.run is not None


class RunManager:
    """Every change of a run's life goes through here; the run directory records it."""

    def __init__(self, store: RunStore, pipeline: ConfigPipeline, monitors: Monitors, sampler: Sampler | None = None):
        self.store = store
        self.pipeline = pipeline
        self.monitors = monitors
        self.launcher = Launcher(store)
        self.sampler = sampler
        # Told of every run that (re)starts training or is re-attached to, so that the
        # backend watches it on its own (the facade wires the decisions here).
        self.on_launch: Callable[[str], None] = lambda run_id: None
        # Called before any trainer (a training or an evaluation run) starts: whatever else
        # holds the GPU for the user (the Chat tab's servers) lets go of it first.
        self.before_launch: list[Callable[[], None]] = []
        self._lock = threading.Lock()  # start, resume and delete: one at a time
        self._watched: str | None = None  # the run the sampler samples
        self._last_seen: dict[str, RunState] = {}  # to stop a trainer whose run directory vanished

    # --- reading --------------------------------------------------------------------

    def refresh(self, run_id: str) -> RunState:
        """The run's state now (a run that ended while nobody watched is settled). Raises
        RunNotFound, after stopping its trainer, when the run's directory is gone."""
        try:
            state = self.launcher.refresh(run_id)
        except RunNotFound:
            self._vanished(run_id)
            raise
        self._last_seen[run_id] = state
        if not state.active:
            self._unwatch_if(run_id)
        return state

    def runs(self) -> list[RunState]:
        return [self.launcher.refresh(s.id) if s.active else s for s in self.store.list()]

    def active_run(self) -> RunState | None:
        for state in self.store.list():
            if state.active:
                state = self.launcher.refresh(state.id)
                if state.active:
                    return state
        return None

    def is_active(self, run_id: str) -> bool:
        try:
            return self.launcher.refresh(run_id).active
        except RunNotFound:
            return False

    # --- start, resume, re-attach ---------------------------------------------------

    def start(
        self,
        config: RunConfig,
        preset: HardwarePreset | None,
        plan: DistributedPlan | None,
        findings: list[Finding],
        stop_on_nan: bool = False,
    ) -> StartResult:
        """Creates the run and launches its trainer, unless another run is training."""
        with self._lock:  # a double-click launches exactly one run
            active = self.active_run()
            if active is not None:
                return StartResult(None, findings + [Finding.of("start", "run-active", run_id=active.id, state=active.state)])
            return StartResult(self._create_and_launch(config, preset, plan, stop_on_nan), findings)

    def _create_and_launch(self, config: RunConfig, preset: HardwarePreset | None, plan: DistributedPlan | None, stop_on_nan: bool) -> RunState:
        import yaml

        from backend.config.distributed import deepspeed_files, free_port, launch_env, saved_form

        if plan is not None and plan.nnodes == 1:
            plan = replace(plan, master_port=free_port())
        run_id = self.store.new_run_id(config.run_name)
        output_dir = self.store.root / run_id / OUTPUT_DIR
        form = saved_form(config, plan)  # the checked values, not what was typed
        state = self.store.create(
            name=config.run_name,
            preset=config.hardware.preset,
            model=config.model.model_name_or_path,
            files={
                CONFIG_FILE: yaml.safe_dump(self.pipeline.run_args(config, plan, output_dir), sort_keys=False, allow_unicode=True),
                FORM_FILE: json.dumps(form, indent=2),
                LOG_FILE: "",
                **(deepspeed_files(plan) if plan is not None else {}),
                **self._user_deepspeed_file(config),
            },
            run_id=run_id,
        )
        if stop_on_nan:
            self.store.update(state.id, stop_on_nan=True)
        env = dict(config.hardware.env)
        if plan is not None:
            env.update(launch_env(plan))
        return self.launch(state.id, env)

    def _user_deepspeed_file(self, config: RunConfig) -> dict[str, str]:
        """The DeepSpeed file named in Other keys, copied into the run (checked before: a
        Start with an unusable one never gets here)."""
        from backend.config.other_keys import USER_DEEPSPEED_FILE

        found = self.pipeline.deepspeed_file(config)
        return {USER_DEEPSPEED_FILE: found.text} if found is not None else {}

    def start_evaluation(
        self,
        run_id: str,
        name: str,
        model: str,
        preset: str,
        files: dict[str, str],
        source_run: str,
        env: Mapping[str, str],
        findings: list[Finding] | None = None,
    ) -> StartResult:
        """Creates an evaluation run (kind "evaluate", its files already checked by the
        EvaluationDesk) and launches it like a trainer, unless another run is active."""
        findings = list(findings or [])
        with self._lock:
            active = self.active_run()
            if active is not None:
                return StartResult(None, findings + [Finding.of("evaluate", "run-active", message="eval-run-active", run_id=active.id, state=active.state)])
            state = self.store.create(name=name, preset=preset, model=model, files=files, run_id=run_id, kind="evaluate", source_run=source_run)
            return StartResult(self.launch(state.id, env), findings)

    def launch(self, run_id: str, env: Mapping[str, str], command: list[str] | None = None) -> RunState:
        """Starts the trainer (or `command`, a stand-in in tests) of an existing run, and
        watches it: telemetry samples it, the backend decides about it."""
        for let_go in self.before_launch:
            let_go()
        state = self.launcher.start(run_id, env, command=command)
        self._watch(state)
        self.on_launch(run_id)
        return state

    def resume(self, run_id: str) -> StartResult:
        """Continues a stopped or failed run from its latest complete checkpoint."""
        from backend.runs.resume import Refusal, prepare_resume, resume_plan

        with self._lock:
            active = self.active_run()
            if active is not None:
                return StartResult(None, [Finding.of("resume", "run-active", message="run-active-resume", run_id=active.id, state=active.state)])
            refusal = resume_plan(self.store, run_id)
            if isinstance(refusal, Refusal):
                return StartResult(None, [refusal.finding()])
            from backend.config.distributed import form_from_saved

            form = form_from_saved(self.store.read_form(run_id))
            preset = self.pipeline.preset(str(form.get("preset", "")))
            env = dict(preset.env) if preset else {}
            plan, plan_findings = self.pipeline.plan_of(form, preset)
            # A form.json edited by hand (or written before a rule existed) is checked like
            # the page's form: a refused RCCL line stops the resume before anything changes.
            if has_problems(plan_findings):
                return StartResult(None, plan_findings)
            prepare_resume(self.store, run_id)
            if plan is not None:
                from backend.config.distributed import launch_env

                env.update(launch_env(plan))
            self.monitors.forget(run_id)  # re-read the whole curve, resumed steps included
            return StartResult(self.launch(run_id, env), [])

    def reattach(self) -> RunState | None:
        """After a restart: follow the run that is still training, settle the ones that ended."""
        active = self.active_run()
        if active is not None:
            self._watch(active)
            self.on_launch(active.id)
        return active

    # --- stop and the run's settings -------------------------------------------------

    def stop(self, run_id: str) -> RunState:
        state = self.launcher.stop(run_id)
        self._unwatch_if(run_id)
        return state

    def stop_for_alert(self, run_id: str) -> RunState:
        """Stops a run whose loss or gradients diverged (its stop-on-NaN setting is on),
        saying why in its state."""
        self.launcher.stop(run_id)
        self._unwatch_if(run_id)
        # A message id: the page renders it in its own language (view.stop_reason_text).
        return self.store.update(run_id, stop_reason="reason.stopped_on_nan", stop_reason_params={})

    def set_stop_on_nan(self, run_id: str, on: bool) -> None:
        """Changes the setting of a run that trains; an ended run keeps the one it ran with."""
        try:
            if self.store.read(run_id).active:
                self.store.update(run_id, stop_on_nan=bool(on))
        except RunNotFound:
            pass

    # --- delete ---------------------------------------------------------------------

    def delete(self, run_id: str) -> list[Finding]:
        """Deletes a run that is not training; returns why not (nothing when deleted).
        Raises RunNotFound for an id that is not a run (a hostile one included)."""
        with self._lock:  # a resume cannot start the run while it is being removed
            state = self.refresh(run_id)
            if state.active:
                return [Finding.of("delete", "run-active", message="run-active-delete", run_id=run_id, state=state.state)]
            self.monitors.forget(run_id)
            self._last_seen.pop(run_id, None)
            self.store.delete(run_id)
            return []

    def delete_all(self, run_ids: list[str]) -> list[Finding]:
        """Deletes each run that can be; why not, for the others (one gone already too)."""
        refusals: list[Finding] = []
        for run_id in run_ids:
            try:
                refusals += self.delete(run_id)
            except RunNotFound:
                refusals.append(Finding.of("delete", "run-missing", run_id=run_id))
        return refusals

    # --- the sampler, and runs that vanished ------------------------------------------

    def _watch(self, state: RunState) -> None:
        if self.sampler is None:
            return
        self._watched = state.id
        self.sampler.watch(self.store.run_dir(state.id) / SAMPLES_FILE, state.pid)

    def lend_sampler(self, samples_path: Path | None, pid: int | None) -> bool:
        """Points the sampler at a process that is not a run's trainer (a chat server), or
        away from it (None). Refused (False) while a run is watched: its chart comes first."""
        if self.sampler is None or self._watched is not None:
            return False
        self.sampler.watch(samples_path, pid)
        return True

    def _unwatch_if(self, run_id: str) -> None:
        if self.sampler is not None and self._watched == run_id:
            self._watched = None
            self.sampler.watch(None, None)

    def _vanished(self, run_id: str) -> None:
        """The run's directory was deleted by hand while the app ran. Its trainer can no
        longer be seen, stopped from the page, or counted by the one-run-at-a-time rule, and
        it writes into a directory nobody reads: stop it (by pid and start time)."""
        self.monitors.forget(run_id)
        self._unwatch_if(run_id)
        last = self._last_seen.pop(run_id, None)
        if last is not None and last.active and last.pid is not None and last.pid_started is not None:
            stop_tree(ProcessIdentity(last.pid, last.pid_started))


__all__ = ["RunManager", "StartResult"]
