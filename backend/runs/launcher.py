"""Starts, watches and stops the trainer's process tree.

The launcher knows processes and run directories, not widgets or YAML keys. The trainer
runs in its own session (it keeps training if the web server dies), its output goes to a
file (a full pipe would stall training), and it is identified by pid *and* start time
so that a reused pid is never mistaken for it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from backend.config.distributed import CPU_WORKERS_VARIABLE, PLAN_VARIABLES
from backend.process_start import start_key
from backend.runs import CONFIG_FILE, LOG_FILE, OUTPUT_DIR, RunNotFound, RunState, RunStore, attempt_fields, safe_files
from backend.runs.trainer_log import log_path, read_log_tail
from backend.security.child_env import child_env, refused_settings

if TYPE_CHECKING:
    from backend.llama_factory.helper_client import LlamaFactoryHelper, WarmChild

# Stop: ask the trainer to stop and save (SIGABRT, which LLaMA-Factory handles when
# LLAMABOARD_ENABLED=1), then SIGTERM the tree, then SIGKILL it; all within STOP_BUDGET_S.
GRACEFUL_STOP_S = 6.0
TERM_STOP_S = 2.0
STOP_BUDGET_S = 10.0
STOPPED_BY_USER = "reason.stopped_by_user"  # why a run is stopped unless its stopper says otherwise

# Environment every trainer gets: no hub is ever contacted, output is not buffered, and
# LLaMA-Factory's graceful-abort handler is switched on.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "PYTHONUNBUFFERED": "1",
    "LLAMABOARD_ENABLED": "1",
}


def llamafactory_cli() -> str:
    """The llamafactory-cli beside this Python (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "llamafactory-cli"
    if beside.exists():
        return str(beside)
    found = shutil.which("llamafactory-cli")
    if found is None:
        raise FileNotFoundError(
            "llamafactory-cli was not found. Fix: run `make setup` (or `pip install llamafactory==0.9.5`) in RocBoard's environment."
        )
    return found


# RocBoard's own module folder for the workers of a CPU run of several processes (never a
# user's: PYTHONPATH is not settable, backend/security/child_env.py).
TRAINER_SITE = Path(__file__).resolve().parent / "trainer_site"


def trainer_command(config_file: str = CONFIG_FILE) -> list[str]:
    return [llamafactory_cli(), "train", config_file]


# Variables the code that calls Launcher.start sets itself, never copied from a user's text:
# the launch plan (backend/distributed.launch_env) and where a run keeps its caches (the
# multi-node test gives each "node" its own datasets cache). Everything else in `preset_env`
# is a user's setting (a preset's env:, the RCCL lines) and must pass child_env's rule.
LAUNCH_NAMES: frozenset[str] = frozenset(
    {
        "PATH",
        *PLAN_VARIABLES,
        CPU_WORKERS_VARIABLE,
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_DATASETS_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "TRANSFORMERS_CACHE",
    }
)


def _split_launch_env(preset_env: Mapping[str, str]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(RocBoard's own variables, the user's settings) of what Launcher.start was given."""
    own = {name: value for name, value in preset_env.items() if name in LAUNCH_NAMES}
    settings = [(name, value) for name, value in preset_env.items() if name not in LAUNCH_NAMES]
    return own, settings


def trainer_env(run_dir: Path, preset_env: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The trainer's whole environment: the allow-listed part of `base` (default: this
    process's; never ROCBOARD_AUTH or another secret, see backend/security/child_env.py), the
    settings of `preset_env` that child_env allows, the launch variables, OFFLINE_ENV."""
    own, settings = _split_launch_env(preset_env)
    own.update(OFFLINE_ENV)
    # LLaMA-Factory starts a bare `torchrun` for multi-GPU runs: the one beside this Python
    # must be found even when the venv was never activated.
    here = str(Path(sys.executable).parent)
    path = own.get("PATH", (os.environ if base is None else base).get("PATH", ""))
    if path.split(os.pathsep)[0] != here:
        path = os.pathsep.join([here, path]) if path else here
    own["PATH"] = path
    own["LLAMABOARD_WORKDIR"] = str(run_dir / OUTPUT_DIR)
    if own.pop(CPU_WORKERS_VARIABLE, None) == "1":
        # A CPU run of several processes: its workers load trainer_site/sitecustomize.py, which
        # lets transformers resume it (its optimizer is loaded onto "cpu:0"; the module says why).
        own["PYTHONPATH"] = str(TRAINER_SITE)
    return child_env(base, settings, own)


def helper_env(runs_root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The LLaMA-Factory helper's environment (backend/llama_factory/zygote.py): a trainer's,
    without a preset's settings, plus PYTORCH_NVML_BASED_CUDA_CHECK=1 so that asking torch
    whether CUDA is there never initialises it in the helper (fork-safety)."""
    env = trainer_env(runs_root, {}, base)
    env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    return env


def refused_trainer_settings(preset_env: Mapping[str, str]) -> list[str]:
    """One line per setting of `preset_env` that trainer_env leaves out, and why."""
    return [f"{refused.rule}: {refused.problem}" for refused in refused_settings(_split_launch_env(preset_env)[1])]


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    started: float  # psutil create_time(): shown and measured, compared only without a start key
    start_key: str = ""  # backend/process_start.py: what names the process ("" in older records)

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The identity of live process `pid`, or None (gone already)."""
        try:
            started = psutil.Process(pid).create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        return cls(pid, started, start_key(pid) or "")

    def process(self) -> psutil.Process | None:
        """The live process with this identity, or None (gone, or the pid was reused)."""
        try:
            process = psutil.Process(self.pid)
            key = start_key(self.pid) if self.start_key else None
            if key is not None:
                if key != self.start_key:
                    return None
            elif abs(process.create_time() - self.started) > 0.01:
                # A record without a start key (written before them): create_time() moves
                # when the clock is stepped, which is why start keys exist.
                return None
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            return process
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return [root]


def _graceful_targets(tree: list[psutil.Process]) -> list[psutil.Process]:
    """The processes that run LLaMA-Factory's trainer loop and handle SIGABRT.

    Without torchrun the root `llamafactory-cli` is the trainer. With FORCE_TORCHRUN the
    root only waits on torchrun, whose children are the workers (each in its own process
    group, which is why a signal to our group alone would leave them training)."""
    agents = [p for p in tree if _is_torchrun(p)]
    if not agents:
        return tree[:1]
    workers: list[psutil.Process] = []
    for agent in agents:
        try:
            workers.extend(agent.children())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return workers


def _is_torchrun(process: psutil.Process) -> bool:
    try:
        return any("torchrun" in part or "torch.distributed.run" in part for part in process.cmdline()[:3])
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _signal_all(processes: list[psutil.Process], signum: int) -> None:
    for process in processes:
        try:
            process.send_signal(signum)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue


def stop_tree(identity: ProcessIdentity, graceful_s: float = GRACEFUL_STOP_S, term_s: float = TERM_STOP_S) -> list[int]:
    """Ends the whole process tree rooted at `identity`; returns pids still alive (none, normally).

    The tree is re-walked at every step: a worker started mid-stop is not missed, and a
    process already gone is not an error."""
    root = identity.process()
    if root is None:
        return []
    known: dict[int, psutil.Process] = {p.pid: p for p in _tree(root)}

    def alive() -> list[psutil.Process]:
        if _alive(root):
            for process in _tree(root):
                known.setdefault(process.pid, process)
        return [p for p in known.values() if _alive(p)]

    def wait(seconds: float) -> list[psutil.Process]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            remaining = alive()
            if not remaining:
                return []
            time.sleep(0.1)
        return alive()

    if graceful_s > 0:
        _signal_all(_graceful_targets(list(known.values())), signal.SIGABRT)
        if not wait(graceful_s):
            return []
    _signal_all(alive(), signal.SIGTERM)
    if not wait(term_s):
        return []
    _signal_all(alive(), signal.SIGKILL)
    return [p.pid for p in wait(2.0)]


def starter_alive(state: RunState) -> bool:
    """Whether the process that began starting this run still runs (pid and start time)."""
    if state.starter_pid is None or state.starter_started is None:
        return False
    return ProcessIdentity(state.starter_pid, state.starter_started, state.starter_start_key).process() is not None


def derive_final_state(run_dir: Path) -> tuple[str, str]:
    """(state, reason) of a run whose trainer ended while nobody watched it."""
    # The log's end only (it can be hundreds of MB), without following a link planted in the run.
    finished = read_log_tail(log_path(run_dir), run_dir, loss=False).finished
    has_weights = any(safe_files.is_regular_file(run_dir, f"{OUTPUT_DIR}/{name}") for name in ("adapter_model.safetensors", "model.safetensors"))
    # An evaluation (predict mode) writes no weights: its scores, written last, say it ended.
    if safe_files.is_regular_file(run_dir, f"{OUTPUT_DIR}/predict_results.json"):
        return "finished", "reason.finished_unwatched"
    # The reason is a message id (backend/view.py renders it in the page's language).
    if finished and has_weights:
        return "finished", "reason.finished_unwatched"
    return "failed", "reason.failed_unwatched"


class Launcher:
    """Owns the trainer processes of one runs directory."""

    def __init__(self, store: RunStore):
        self.store = store
        self._children: dict[str, subprocess.Popen | WarmChild] = {}
        # run id -> why it is being stopped (a reason.* id and its params): the end that the
        # trainer's wait thread records says so itself, never "stopped by the user" first.
        self._stopping: dict[str, tuple[str, dict[str, str]]] = {}
        self._lock = threading.Lock()
        # The LLaMA-Factory helper trainers are forked from (warm starts); None: always cold.
        self.helper: LlamaFactoryHelper | None = None
        self.last_cold_reason = ""  # why the last start was cold (benches and tests read it)
        # Told of each trainer end this launcher records (the run manager starts the next
        # queued run); called outside the launcher's lock, on the thread that saw the end.
        self.on_end: Callable[[str], None] = lambda run_id: None

    def start(self, run_id: str, preset_env: Mapping[str, str], command: list[str] | None = None) -> RunState:
        """Launches `command` (default: llamafactory-cli train config.yaml) in the run dir."""
        run_dir = self.store.run_dir(run_id)
        custom = command is not None
        command = command or trainer_command()
        env = trainer_env(run_dir, preset_env)
        # train.log is opened inside the run without following links: a planted link would
        # make the trainer's output overwrite whatever it points at.
        log = os.fdopen(safe_files.open_in_run(run_dir, LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
        # The page refuses these before a start; anything that still arrives here (a run
        # resumed from an older form.json) is left out, and train.log says so.
        for line in refused_trainer_settings(preset_env):
            log.write(f"RocBoard: left out of the trainer's environment: {line}\n".encode("utf-8", "replace"))
        log.flush()
        process: subprocess.Popen | WarmChild | None
        try:
            process = self._start_warm(run_dir, env, custom)
            if process is None:
                process = subprocess.Popen(
                    command,
                    cwd=run_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # survives the web server; never gets its Ctrl-C
                    close_fds=True,
                )
        except BaseException as error:
            log.write(f"RocBoard: the trainer could not start: {error}\n".encode("utf-8", "replace"))
            self.record_start_failed(run_id, error)
            raise
        finally:
            log.close()
        launch = "cold" if isinstance(process, subprocess.Popen) else "warm"
        identity = ProcessIdentity.of(process.pid)
        with self._lock:
            self._children[run_id] = process
        state = self.store.update(
            run_id,
            **attempt_fields(
                state="running", pid=process.pid, pid_started=identity and identity.started, pid_start_key=identity.start_key if identity else "",
                started_at=time.time(), command=tuple(command), launch=launch,
            ),
        )  # fmt: skip
        threading.Thread(target=self._wait_child, args=(run_id, process), daemon=True, name=f"wait-{run_id}").start()
        return state

    def record_start_failed(self, run_id: str, error: BaseException) -> None:
        """No trainer will come: the run says so rather than stay "starting" (this process
        lives on, and a start of a live process is its own to finish: see refresh)."""
        self.store.update(
            run_id, state="failed", stop_reason="reason.launch_failed", stop_reason_params={"error": str(error)[:300]},
            ended_at=time.time(), starter_pid=None, starter_started=None, starter_start_key="",
        )  # fmt: skip

    def _start_warm(self, run_dir: Path, env: dict[str, str], custom: bool) -> WarmChild | None:
        """The trainer forked from the LLaMA-Factory helper (same command, same environment,
        output appended to train.log), or None: start it cold. Cold when there is no helper,
        for a custom command, for torchrun / multi-node launches, for an environment the
        helper did not import with (helper_client.cold_reason), or when the helper is not
        ready within READY_WAIT_S (a Start right after the app started waits for it)."""
        from backend.llama_factory.helper_client import cold_reason

        helper = self.helper
        if helper is None:
            self.last_cold_reason = "no helper"
            return None
        if custom:
            self.last_cold_reason = "custom command"
            return None
        reason = cold_reason(env, helper.env)
        if reason is not None:
            self.last_cold_reason = reason
            return None
        child = helper.train(run_dir, env)
        self.last_cold_reason = "" if child is not None else f"helper {helper.state}"
        return child

    def _wait_child(self, run_id: str, process: subprocess.Popen | WarmChild) -> None:
        code = process.wait()
        if getattr(process, "lost", False):
            # The helper died before the trainer: it still runs in its own session, and its
            # run ends like an unwatched one (refresh, from its pid and its files).
            with self._lock:
                if self._children.get(run_id) is process:
                    self._children.pop(run_id, None)
            return
        self._finish(run_id, code, pid=process.pid)

    def _finish(self, run_id: str, exit_code: int | None, reason: str = "", pid: int | None = None) -> None:
        """Records how the trainer `pid` ended (None: the run's current trainer); `reason` is
        a message id (`reason.*`).

        Under the lock, like refresh's record of an unwatched end: a tab's tick, the decisions
        loop and a stop may all see the same end at once, and one record must not overwrite
        another's (a stop recorded as failed), nor an older attempt's end a resumed one."""
        with self._lock:
            child = self._children.get(run_id)
            if child is not None and (pid is None or child.pid == pid):
                del self._children[run_id]
            try:
                current = self.store.read(run_id)
            except RunNotFound:
                self._stopping.pop(run_id, None)
                return  # the run directory was deleted while it ran
            if pid is not None and current.pid not in (None, pid):
                return  # a newer attempt (a resume) owns the run now
            stopping = self._stopping.pop(run_id, None)
            params: dict[str, str] = {}
            if stopping is not None:
                state = "stopped"
                if not reason:
                    reason, params = stopping[0], dict(stopping[1])
            elif exit_code == 0:
                state = "finished"
            else:
                state = "failed"
                if exit_code is not None and exit_code < 0 and not reason:
                    reason, params = "reason.killed_by_signal", {"signal": signal.Signals(-exit_code).name}
            try:
                self.store.update(run_id, state=state, exit_code=exit_code, stop_reason=reason, stop_reason_params=params, ended_at=time.time())
            except RunNotFound:
                return
        self.on_end(run_id)

    def stop(self, run_id: str, reason: str = STOPPED_BY_USER, reason_params: dict[str, str] | None = None) -> RunState:
        """Stops the run's trainer; its end is recorded as stopped for `reason` (a reason.* id)."""
        state = self.store.read(run_id)
        if not state.active or not state.local:
            return state
        with self._lock:
            self._stopping[run_id] = (reason, dict(reason_params or {}))
            child = self._children.get(run_id)
        identity = self._identity(state)
        if identity is not None:
            stop_tree(identity)
        if child is not None:
            child.wait(timeout=5)  # the wait thread records the final state
            deadline = time.monotonic() + 2
            while self.store.read(run_id).active and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.store.read(run_id).active and not self.is_child(run_id):
                state = self.refresh(run_id)  # a warm trainer whose helper died: nobody reports its end
                with self._lock:
                    self._stopping.pop(run_id, None)
                return state
        else:
            self._finish(run_id, None)
        return self.store.read(run_id)

    def is_child(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._children

    @staticmethod
    def _identity(state: RunState) -> ProcessIdentity | None:
        if state.pid is None or state.pid_started is None:
            return None
        return ProcessIdentity(state.pid, state.pid_started, state.pid_start_key)

    def refresh(self, run_id: str, state: RunState | None = None) -> RunState:
        """The state of a run we did not start in this process (after a restart): still
        alive by pid and start time, or ended, with its end derived from its files. `state`:
        the run's state as the caller just read it (not read again)."""
        if state is None:
            state = self.store.read(run_id)
        if not state.active or not state.local or self.is_child(run_id):
            return state  # a Slurm run is backend/slurm/executor.py's to settle
        identity = self._identity(state)
        if identity is not None and identity.process() is not None:
            return state
        if identity is None and state.state == "starting":
            # No trainer yet: the process starting it (this one, a command line, another app)
            # finishes the start while it lives; gone, it was interrupted halfway.
            if starter_alive(state):
                return state
            final, reason = "failed", "reason.start_interrupted"
        else:
            final, reason = derive_final_state(self.store.run_dir(run_id))
        with self._lock:
            # Recorded once, for the trainer found gone: another thread (a stop, a tab's tick,
            # the decisions loop) may have recorded its end meanwhile, or a resume started a
            # new one.
            current = self.store.read(run_id)
            if not current.active or (current.pid, current.pid_started) != (state.pid, state.pid_started) or run_id in self._children:
                return current
            # Stopped by us and seen gone here before stop() recorded it; stop() clears the mark.
            params: dict[str, str] = {}
            if run_id in self._stopping:
                final, (reason, params) = "stopped", self._stopping[run_id]
            ended = self.store.update(run_id, state=final, stop_reason=reason, stop_reason_params=dict(params), ended_at=state.ended_at or time.time())
        self.on_end(run_id)
        return ended

    def live_pid(self, run_id: str) -> int | None:
        try:
            state = self.store.read(run_id)
        except RunNotFound:
            return None
        identity = self._identity(state)
        return identity.pid if identity is not None and state.active and identity.process() is not None else None
