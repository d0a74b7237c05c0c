"""Runs on disk: `runs/<run-id>/` is the single source of truth; the page is a view of it.

    runs/<run-id>/
        state.json      RunState (id, created, preset, model, pid + start time, state, exit code)
        form.json       the form values the run was started from (rebuilds its RunConfig)
        config.yaml     the LLaMA-Factory YAML, exactly what the trainer read
        train.log       the trainer's stdout and stderr
        samples.jsonl   telemetry readings, one JSON object a line
        output/         LLaMA-Factory's output_dir: trainer_log.jsonl, checkpoints, adapter
        adapter.zip     built on demand for download

A run directory appears whole or not at all: it is assembled under a hidden temporary
name and renamed into place, so a failed start never leaves a half-made run behind.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from backend.process_start import START_KEY_MAX_CHARS, start_key
from backend.runs import safe_files

RunStateName = Literal["queued", "starting", "pending", "running", "finished", "failed", "stopped"]
# A run is active while something of it may be alive: a trainer starting or training here, or
# a Slurm job waiting (`pending`) or running. A `queued` run waits in RocBoard's own queue for
# this machine (backend/runs/queue.py): nothing of it runs yet.
ACTIVE_STATES = ("starting", "pending", "running")
RUN_KINDS = ("train", "evaluate")
EXECUTORS = ("local", "slurm")  # where a run executes: this machine, or a Slurm cluster

STATE_FILE = "state.json"
FORM_FILE = "form.json"
CONFIG_FILE = "config.yaml"
LOG_FILE = "train.log"
SAMPLES_FILE = "samples.jsonl"
OUTPUT_DIR = "output"
ADAPTER_ZIP = "adapter.zip"
# The environment a run's trainer is to get, written when the run is created for a later
# start: a queued run (backend/runs/queue.py) or a Slurm run's node tasks (backend/slurm/).
LAUNCH_FILE = "launch.json"

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9._-]+")
RUN_ID_NAME_MAX = 64


def run_id_part(name: str) -> str:
    """The run name as it goes into the run's id (its folder): the name itself when it is
    ASCII letters, digits, '.', '_', '-'; otherwise its ASCII parts and a short hash of the
    whole name ("水果" -> "27c18075", "my 水果" -> "my-b8edd1ed"), so the folder, the Slurm
    job name and every command line stay ASCII while the page shows the name as typed
    (state.json's `name`). The same name always gives the same part."""
    ascii_part = _NOT_IN_ID.sub("-", name).strip(".-")[:RUN_ID_NAME_MAX]
    if ascii_part == name:
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{ascii_part}-{digest}" if ascii_part else digest

# The small files of a run are read whole; anything larger is not one the app wrote.
SMALL_FILE_MAX_BYTES = 1024 * 1024


_this_process: tuple[int, float, str] | None = None  # (pid, start time, start key), looked up once per process


def starter_fields() -> dict[str, Any]:
    """RunState's starter fields naming this process (a run it is about to start)."""
    global _this_process
    if _this_process is None or _this_process[0] != os.getpid():  # a fork is another process
        import psutil

        _this_process = (os.getpid(), psutil.Process().create_time(), start_key(os.getpid()) or "")
    return {"starter_pid": _this_process[0], "starter_started": _this_process[1], "starter_start_key": _this_process[2]}


def attempt_fields(**fields: Any) -> dict[str, Any]:
    """RunState's fields for an attempt that has just begun (a trainer started here, a job
    submitted to Slurm): the last attempt's process, start, end and reason cleared, and no
    starter (the start is done); `fields` (what this attempt is) on top."""
    cleared: dict[str, Any] = {
        "pid": None,
        "pid_started": None,
        "pid_start_key": "",
        "started_at": None,
        "exit_code": None,
        "stop_reason": "",
        "stop_reason_params": {},
        "ended_at": None,
        "starter_pid": None,
        "starter_started": None,
        "starter_start_key": "",
    }
    return {**cleared, **fields}


@dataclass(frozen=True)
class RunState:
    id: str
    name: str
    created: str  # ISO 8601, UTC
    preset: str
    model: str
    state: RunStateName = "starting"
    pid: int | None = None
    pid_started: float | None = None  # the process's start time: a pid alone can be reused
    pid_start_key: str = ""  # what names that process for good (backend/process_start.py)
    exit_code: int | None = None
    # Why the run ended: a message id ("reason.*", with its values in stop_reason_params),
    # rendered in the page's language by backend/view.py. A state file written before ids
    # holds an English sentence here, shown as written.
    stop_reason: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    command: tuple[str, ...] = ()
    resumed_from: str = ""  # checkpoint directory of the last resume, if any
    attempts: int = 1
    stop_reason_params: dict[str, Any] = field(default_factory=dict, hash=False)
    # Saved with the run, so that the backend stops it on a NaN/inf loss or exploding
    # gradients whether or not a page is open (backend/service/decisions.py).
    stop_on_nan: bool = False
    # How the trainer was started: "warm" (forked from the LLaMA-Factory helper, see
    # backend/llama_factory/helper_client.py), "cold" (a fresh llamafactory-cli), "" (older runs).
    launch: str = ""
    # What the run does: "train" (a trainer) or "evaluate" (LLaMA-Factory's predict mode on a
    # trained run's adapter, backend/evaluate); a state file written before kinds is "train".
    kind: str = "train"
    source_run: str = ""  # the run an evaluation evaluates ("" for a training run)
    # Where it executes (backend/config/placement.py): "local" (this machine; a state file
    # written before placements) or "slurm".
    executor: str = "local"
    queued_at: float | None = None  # when it joined the local queue (state "queued")
    # A Slurm run: its job (the current attempt's), what Slurm last said of it, and whether
    # RocBoard asked it to stop (so its end reads "stopped" whoever sees it).
    job_id: str = ""
    slurm_state: str = ""  # Slurm's own JobState: PENDING, RUNNING, TIMEOUT...
    slurm_reason: str = ""  # why it waits (Resources, Priority...), as Slurm says it
    slurm_nodes: str = ""  # its node list (n[1-2])
    slurm_start: str = ""  # while pending: when Slurm expects to start it, if it says
    submitted_at: float | None = None
    stop_requested: bool = False
    # While "starting" (no trainer yet): the process that is starting it, pid and start time.
    # A start takes seconds (checks, a fork, a cold Popen) and other processes look meanwhile
    # (a tab's tick, `app.py status`, another app): while this process lives the start is
    # its to finish; once it is gone with no trainer recorded, the start was interrupted.
    starter_pid: int | None = None
    starter_started: float | None = None
    starter_start_key: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["command"] = list(self.command)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["command"] = tuple(known.get("command") or ())
        if known.get("kind") not in RUN_KINDS:
            known["kind"] = "train"  # older state files have none; an unknown one is not trusted
        if not isinstance(known.get("source_run", ""), str):
            known["source_run"] = ""
        if known.get("executor", "local") not in EXECUTORS:
            known["executor"] = "local"  # an unknown one is not trusted: no Slurm command is run for it
        for name in ("job_id", "slurm_state", "slurm_reason", "slurm_nodes", "slurm_start"):
            if not isinstance(known.get(name, ""), str):
                known[name] = ""
        if not isinstance(known.get("starter_pid"), int) or isinstance(known.get("starter_pid"), bool) or not isinstance(known.get("starter_started"), (int, float)):
            known["starter_pid"], known["starter_started"] = None, None
        for name in ("pid_start_key", "starter_start_key"):
            value = known.get(name, "")
            if not (isinstance(value, str) and value.isascii() and len(value) <= START_KEY_MAX_CHARS):
                known[name] = ""  # then the start time alone names the process, as before keys
        if known.get("job_id") and not (known["job_id"].isascii() and known["job_id"].isdigit() and len(known["job_id"]) < 19):
            known["job_id"] = ""  # a job id is digits: anything else never reaches scancel
        return cls(**known)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def alive(self) -> bool:
        """Active, or queued to start here: the page keeps asking about it, Stop acts on it."""
        return self.active or self.state == "queued"

    @property
    def local(self) -> bool:
        """Whether it executes on this machine (the one-run-at-a-time rule and the queue are
        about these)."""
        return self.executor != "slurm"


class RunNotFound(LookupError):
    pass


def read_form_file(run_dir: Path) -> dict[str, Any]:
    """A run's form.json mapping as written (bounded, no link followed); {} when it is missing
    or not a JSON object."""
    try:
        form = json.loads(safe_files.read_text(run_dir, FORM_FILE, SMALL_FILE_MAX_BYTES))
    except (OSError, ValueError):
        return {}
    return form if isinstance(form, dict) else {}


@dataclass
class RunStore:
    """The runs directory: creates, reads and updates runs."""

    root: Path
    _last_id: str = field(default="", repr=False)
    # list()'s reads, each kept while its state file's settled key stays the same (see list).
    _listed: dict[str, tuple[tuple[int, int, int, int], RunState]] = field(default_factory=dict, repr=False, compare=False)
    _listed_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    def ensure_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def _run_path(self, run_id: str) -> Path:
        """Where run `run_id` would be; refuses ids that could point outside the runs dir."""
        if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id) or run_id in (".", ".."):
            raise RunNotFound(f"not a run id: {run_id!r}")
        return self.root / run_id

    def run_dir(self, run_id: str) -> Path:
        """The directory of run `run_id`; refuses ids that could point outside the runs dir."""
        path = self._run_path(run_id)
        # A run directory is a real directory inside the runs dir, and its state file a regular
        # file in it: a symlink planted at either (pointing anywhere) is not a run, so no
        # download or delete can act outside. (Each later open checks again: see safe_files.)
        if not safe_files.is_regular_file(path, STATE_FILE):
            raise RunNotFound(f"no run {run_id!r} in {self.root}")
        return path

    def state_key(self, run_id: str) -> tuple[int, int, int, int] | None:
        """safe_files.settled_key of the run's state file (its lstat, no link followed): the
        same key on a later look means the state file was not written in between; None when
        it is missing, not a regular file, or written too recently to tell."""
        return safe_files.settled_key(safe_files.lstat_in_run(self._run_path(run_id), STATE_FILE))

    def new_run_id(self, name: str) -> str:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        part = run_id_part(name)
        base = f"{stamp}-{part}" if part else stamp
        candidate, n = base, 1
        while (self.root / candidate).exists() or candidate == self._last_id:
            n += 1
            candidate = f"{base}-{n}"
        self._last_id = candidate
        return candidate

    def create(
        self,
        name: str,
        preset: str,
        model: str,
        files: dict[str, str],
        run_id: str | None = None,
        kind: str = "train",
        source_run: str = "",
        executor: str = "local",
        state: RunStateName = "starting",
    ) -> RunState:
        """A new run directory holding `files` (name -> text) and its first state (its kind
        in it from the start: no moment exists where an evaluation reads as a training)."""
        self.ensure_root()
        run_id = run_id or self.new_run_id(name)
        if (self.root / run_id).exists():
            raise FileExistsError(f"run {run_id} already exists")
        run = RunState(
            id=run_id,
            name=name or run_id,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            preset=preset,
            model=model,
            kind=kind,
            source_run=source_run,
            executor=executor,
            state=state,
            queued_at=time.time() if state == "queued" else None,
            **(starter_fields() if state == "starting" else {}),
        )
        staging = Path(tempfile.mkdtemp(prefix=".new-", dir=self.root))
        try:
            # Plain writes: nobody reads the hidden staging dir, and the run appears whole
            # (files and state together) with the one rename below.
            for filename, text in {**files, STATE_FILE: json.dumps(run.to_json(), indent=2)}.items():
                (staging / filename).write_text(text, encoding="utf-8")
            os.rename(staging, self.root / run_id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return run

    def read(self, run_id: str) -> RunState:
        # One walk to the state file, not run_dir's and then the read's: the read refuses what
        # run_dir refuses (a link at the run or its state file, a state file not a regular file).
        run_dir = self._run_path(run_id)
        try:
            data = safe_files.read_bytes(run_dir, STATE_FILE, SMALL_FILE_MAX_BYTES)
        except (FileNotFoundError, NotADirectoryError, safe_files.UnsafePath):
            raise RunNotFound(f"no run {run_id!r} in {self.root}") from None
        except OSError as error:
            raise RunNotFound(f"run {run_id!r} has an unreadable state file: {error}") from None
        try:
            return RunState.from_json(json.loads(data.decode("utf-8")))
        except (ValueError, TypeError, AttributeError) as error:
            raise RunNotFound(f"run {run_id!r} has an unreadable state file: {error}") from None

    def update(self, run_id: str, **changes: Any) -> RunState:
        """Changes some fields of the run's state. Read, changed and written under a lock on the
        run directory (flock of its descriptor): the web app, its threads and a command line
        (`app.py stop`, `status`) may all record something of one run at once, and none may
        write back a state the other has already changed."""
        run_dir = self.run_dir(run_id)
        fd = safe_files.open_run_dir(run_dir)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = replace(self.read(run_id), **changes)
            safe_files.write_atomic(run_dir, STATE_FILE, json.dumps(state.to_json(), indent=2).encode("utf-8"))
        finally:
            os.close(fd)  # and with it the lock
        return state

    def read_listed(self, run_id: str) -> RunState:
        """read(), or the state the last list() read while the state file's settled key is
        still the one it had then (the node panel names each run it shows every 3 s)."""
        with self._listed_lock:
            kept = self._listed.get(run_id)
        return self._read_unless_kept(run_id, kept)[1]

    def _read_unless_kept(self, run_id: str, kept: tuple[tuple[int, int, int, int], RunState] | None) -> tuple[tuple[int, int, int, int] | None, RunState]:
        """(the state file's settled key, the run's state): `kept`'s state while its key is the
        file's, else read. The key is taken before the read: a write after it changes it."""
        key = self.state_key(run_id)
        if key is not None and kept is not None and kept[0] == key:
            return key, kept[1]
        return key, self.read(run_id)

    def list(self) -> list[RunState]:
        """Every readable run, newest first; unreadable ones are skipped. A state file whose
        settled key (safe_files.settled_key: its lstat, last written over 2 s before) is the
        one it had at the last listing is not read again: the node panel and the queue list
        the runs every few seconds, and a node's history of ended runs does not change."""
        if not self.root.is_dir():
            return []
        states = []
        with self._listed_lock:
            known = dict(self._listed)
        listed: dict[str, tuple[tuple[int, int, int, int], RunState]] = {}
        for name in os.listdir(self.root):
            if name.startswith("."):
                continue
            try:
                key, state = self._read_unless_kept(name, known.get(name))
            except RunNotFound:
                continue
            if key is not None:
                listed[name] = (key, state)
            states.append(state)
        with self._listed_lock:
            self._listed = listed
        states.sort(key=lambda s: (s.created, s.id), reverse=True)
        return states

    def read_form(self, run_id: str) -> dict[str, Any]:
        """form.json as written (backend/config/run_form.py reads it typed: read_saved_run)."""
        return read_form_file(self.run_dir(run_id))

    def delete(self, run_id: str) -> None:
        """Removes the run. It is first renamed to a hidden, unpredictable name (rename moves
        a link itself, never its target), so it leaves the listing at once; then removed with
        shutil.rmtree, which on Linux walks by descriptor and never follows a link inside."""
        path = self.run_dir(run_id)
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise RunNotFound(f"no run {run_id!r} in {self.root}")
        doomed = self.root / f".deleting-{secrets.token_hex(8)}"
        os.rename(path, doomed)
        shutil.rmtree(doomed)
