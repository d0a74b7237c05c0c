"""Runs on a Slurm cluster: submit, follow, stop, and re-attach by job id.

The run directory stays the single source of truth: state.json holds the job id and what
Slurm last said of the job (its state, why it waits, its nodes), so a restarted app (or a
`python app.py status` in another shell) shows the run at once and follows the job again.

- **Submit**: the batch script and launch.json are part of the run directory from its first
  moment (RunStore.create); `sbatch --parsable` then gives the job id. A refusal deletes the
  run again: nothing half-made is left (backend/service/run_manager.py does the create).
- **Follow**: one poller thread (`JobWatch`) asks `squeue` about every job a run waits on,
  every POLL_INTERVAL_S, with a timeout; the page and the decisions loop only read what it
  last saw (`refresh`), so a slow or dead slurmctld never blocks a page. An ended job is asked
  of `scontrol show job` once for its exit code; a job Slurm forgot (MinJobAge) of `sacct`
  when accounting is on, else the run's end is told from its node tasks' records.
- **Stop**: `scancel --signal=USR1` reaches every node task, which stops its trainer as the
  local Stop does (LLaMA-Factory saves); a job still running STOP_GRACE_S later is cancelled
  (`scancel`). A job still pending is simply cancelled. The stop is recorded in state.json
  first, so its end reads "stopped" whoever sees it.
"""

from __future__ import annotations

import json
import logging
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backend.runs import RunNotFound, RunState, RunStore, attempt_fields, safe_files
from backend.slurm import NODES_DIR, TASK_FILE
from backend.slurm.client import SlurmClient, SlurmProblem
from backend.slurm.parse import JobInfo, is_number
from backend.slurm.preflight import ClusterFactsCache
from backend.slurm.script import STOP_SIGNAL
from backend.slurm.states import RunUpdate, update_for, update_when_forgotten

log = logging.getLogger(__name__)

POLL_INTERVAL_S = 2.0
STOP_GRACE_S = 20.0  # the node tasks' stop takes at most 10 s, then Python and srun exit
FORGOTTEN = "FORGOTTEN"  # what JobWatch records for an id Slurm (and sacct) no longer know
TASKS_MAX = 1024  # node task records read for one run (its nodes)


def read_tasks(run_dir: Path) -> list[dict[str, Any]]:
    """The node tasks' records (nodes/<rank>/task.json), in rank order."""
    records: list[dict[str, Any]] = []
    ranks = sorted((name for name, found in safe_files.list_dir(run_dir, NODES_DIR) if is_number(name, 7) and stat.S_ISDIR(found.st_mode)), key=int)[:TASKS_MAX]
    for rank in ranks:
        try:
            record = json.loads(safe_files.read_text(run_dir, f"{NODES_DIR}/{rank}/{TASK_FILE}", 64 * 1024))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


class JobWatch:
    """What Slurm last said of each job RocBoard follows, kept fresh by one poller thread."""

    def __init__(self, client: SlurmClient, interval_s: float = POLL_INTERVAL_S, on_seen: Callable[[dict[str, JobInfo]], None] | None = None):
        self.client = client
        self.interval_s = interval_s
        # Told what each poll of the thread saw (the executor records it in the runs' state).
        self.on_seen = on_seen or (lambda answers: None)
        self._wanted: set[str] = set()
        self._seen: dict[str, JobInfo] = {}
        self.problem: SlurmProblem | None = None  # why the last poll got no answer
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, job_id: str) -> None:
        with self._lock:
            if job_id in self._wanted:
                return
            self._wanted.add(job_id)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, daemon=True, name="slurm-jobs")
                self._thread.start()
        self._wake.set()

    def drop(self, job_id: str) -> None:
        with self._lock:
            self._wanted.discard(job_id)

    def seen(self, job_id: str) -> JobInfo | None:
        with self._lock:
            return self._seen.get(job_id)

    def poll(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """Asks Slurm now (on the calling thread) about `job_ids`; what it said is kept."""
        found, problem = self.client.jobs(job_ids)
        if problem is not None:
            with self._lock:
                self.problem = problem
            return {}
        answers: dict[str, JobInfo] = {}
        for job_id in job_ids:
            info = found.get(job_id)
            if info is None or (info.ended and info.exit_code is None):
                detailed, problem = self.client.job(job_id)
                if problem is not None:
                    with self._lock:
                        self.problem = problem
                    continue
                info = detailed or self.client.accounting(job_id) or info or JobInfo(job_id, FORGOTTEN)
            answers[job_id] = info
        with self._lock:
            self.problem = None
            self._seen.update(answers)
        return answers

    def _loop(self) -> None:
        while True:
            with self._lock:
                wanted = sorted(self._wanted)
                if not wanted:
                    self._thread = None
                    return
            try:
                self.on_seen(self.poll(wanted))
            except Exception:  # a parser bug must not end the following of every job
                log.exception("polling Slurm failed")
            self._wake.wait(self.interval_s)
            self._wake.clear()


class SlurmExecutor:
    """Submits, follows and stops the Slurm runs of one runs directory."""

    def __init__(self, store: RunStore, client: SlurmClient | None = None):
        self.store = store
        self.client = client or SlurmClient()
        self.jobs = JobWatch(self.client, on_seen=self._record_seen)
        self._runs_of_jobs: dict[str, str] = {}  # job id -> the run it is the current job of
        self.facts = ClusterFactsCache(self.client)  # what preflight compares a request with
        self.on_end: Callable[[str], None] = lambda run_id: None
        self._lock = threading.Lock()  # one record of each change of a run's state
        self._stopping: set[str] = set()

    # --- submit ---------------------------------------------------------------------------

    def submit(self, run_id: str, argv: list[str]) -> tuple[RunState | None, Any]:
        """sbatch the run's script: (its state, now pending, None), or (None, the refusal or
        problem) and the caller deletes the run."""
        run_dir = self.store.run_dir(run_id)
        job_id, refusal, problem = self.client.submit(argv, cwd=run_dir)
        if job_id is None:
            return None, refusal or problem
        fields = attempt_fields(state="pending", job_id=job_id, slurm_state="PENDING", slurm_reason="", slurm_nodes="", stop_requested=False, submitted_at=time.time(), command=tuple(argv))
        state = self.store.update(run_id, **fields)
        self.follow(state)
        return state, None

    # --- follow ---------------------------------------------------------------------------

    def follow(self, state: RunState) -> None:
        """Keeps the run's state.json up to date with its job from now on, whoever looks."""
        if state.executor == "slurm" and state.active and state.job_id:
            with self._lock:
                self._runs_of_jobs[state.job_id] = state.id
            self.jobs.want(state.job_id)

    def _record_seen(self, answers: dict[str, JobInfo]) -> None:
        for job_id, info in answers.items():
            with self._lock:
                run_id = self._runs_of_jobs.get(job_id)
            if run_id is None:
                continue
            try:
                self._record(run_id, info)
            except RunNotFound:
                self.jobs.drop(job_id)

    def refresh(self, state: RunState, ask_now: bool = False) -> RunState:
        """The run's state with what Slurm last said of its job recorded (`ask_now`: Slurm is
        asked on this thread first, as the command line does)."""
        if state.executor != "slurm" or not state.active:
            return state
        if not state.job_id:
            return self._settle_unsubmitted(state)
        self.follow(state)
        if ask_now:
            self.jobs.poll([state.job_id])
        info = self.jobs.seen(state.job_id)
        if info is None:
            return state
        return self._record(state.id, info)

    def _settle_unsubmitted(self, state: RunState) -> RunState:
        """A run with no job yet is being submitted by its starter (sbatch takes seconds); once
        that process is gone with no job recorded, the submission was interrupted."""
        from backend.runs.launcher import starter_alive

        if state.state != "starting" or starter_alive(state):
            return state
        with self._lock:
            current = self.store.read(state.id)
            if current.state != "starting" or current.job_id or starter_alive(current):
                return current
            return self.store.update(state.id, state="failed", stop_reason="reason.start_interrupted", stop_reason_params={}, ended_at=time.time())

    def _record(self, run_id: str, info: JobInfo) -> RunState:
        with self._lock:
            state = self.store.read(run_id)
            if not state.active or state.job_id != info.job_id:
                return state
            run_dir = self.store.run_dir(run_id)
            if info.state == FORGOTTEN:
                from backend.runs.launcher import derive_final_state

                update = update_when_forgotten(state.slurm_state, state.stop_requested, read_tasks(run_dir), derive_final_state(run_dir))
            else:
                update = update_for(info, state.stop_requested, read_tasks(run_dir) if info.ended else ())
            changes = self._changes(state, update, info)
            if not changes:
                return state
            state = self.store.update(run_id, **changes)
        if update.ended:
            self.jobs.drop(info.job_id)
            with self._lock:
                self._stopping.discard(run_id)
                self._runs_of_jobs.pop(info.job_id, None)
            self.on_end(run_id)
        return state

    @staticmethod
    def _changes(state: RunState, update: RunUpdate, info: JobInfo) -> dict[str, Any]:
        changes: dict[str, Any] = {}
        wanted: dict[str, Any] = {
            "state": update.state,
            "slurm_state": update.slurm_state if update.slurm_state != FORGOTTEN else state.slurm_state,
            "slurm_reason": update.slurm_reason,
            "slurm_nodes": update.slurm_nodes or state.slurm_nodes,
            "slurm_start": info.start_time if info.waiting else "",
        }
        if update.state == "running" and state.started_at is None:
            wanted["started_at"] = time.time()
        if update.ended:
            wanted.update(exit_code=update.exit_code, stop_reason=update.stop_reason, stop_reason_params=update.stop_reason_params, ended_at=time.time())
        for name, value in wanted.items():
            if getattr(state, name) != value:
                changes[name] = value
        return changes

    def problem(self) -> SlurmProblem | None:
        return self.jobs.problem

    # --- stop -----------------------------------------------------------------------------

    def stop(self, run_id: str) -> RunState:
        """Asks the job to stop and save (or cancels it while it waits); returns at once. The
        job is cancelled outright if it still runs STOP_GRACE_S later."""
        state = self.refresh(self.store.read(run_id), ask_now=True)
        if not state.active or not state.job_id:
            return state
        with self._lock:
            if run_id in self._stopping:
                return state
            self._stopping.add(run_id)
            state = self.store.update(run_id, stop_requested=True)
        if state.state == "pending":
            problem = self.client.cancel(state.job_id)
        else:
            problem = self.client.signal(state.job_id, STOP_SIGNAL)
            threading.Thread(target=self._cancel_later, args=(run_id, state.job_id), daemon=True, name=f"slurm-stop-{state.job_id}").start()
        if problem is not None:
            log.warning("stopping Slurm job %s: %s", state.job_id, problem.detail)
        return self.refresh(self.store.read(run_id), ask_now=True)

    def _cancel_later(self, run_id: str, job_id: str) -> None:
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            time.sleep(1.0)
            try:
                if not self.refresh(self.store.read(run_id), ask_now=True).active:
                    return
            except RunNotFound:
                return
        self.client.cancel(job_id)

    def wait(self, run_id: str, timeout_s: float) -> RunState:
        """Asks Slurm until the run has ended or `timeout_s` passed (the command line's stop)."""
        deadline = time.monotonic() + timeout_s
        state = self.refresh(self.store.read(run_id), ask_now=True)
        while state.active and time.monotonic() < deadline:
            time.sleep(1.0)
            state = self.refresh(self.store.read(run_id), ask_now=True)
        return state


__all__ = ["JobWatch", "POLL_INTERVAL_S", "STOP_GRACE_S", "SlurmExecutor", "read_tasks"]
