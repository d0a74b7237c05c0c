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

import json
import os
import re
import secrets
import shutil
import stat
import tempfile
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from backend.runs import safe_files

RunStateName = Literal["starting", "running", "finished", "failed", "stopped"]
ACTIVE_STATES = ("starting", "running")
RUN_KINDS = ("train", "evaluate")

STATE_FILE = "state.json"
FORM_FILE = "form.json"
CONFIG_FILE = "config.yaml"
LOG_FILE = "train.log"
SAMPLES_FILE = "samples.jsonl"
OUTPUT_DIR = "output"
ADAPTER_ZIP = "adapter.zip"

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")

# The small files of a run are read whole; anything larger is not one the app wrote.
SMALL_FILE_MAX_BYTES = 1024 * 1024


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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["command"] = list(self.command)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RunState":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["command"] = tuple(known.get("command") or ())
        if known.get("kind") not in RUN_KINDS:
            known["kind"] = "train"  # older state files have none; an unknown one is not trusted
        if not isinstance(known.get("source_run", ""), str):
            known["source_run"] = ""
        return cls(**known)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES


class RunNotFound(LookupError):
    pass


@dataclass
class RunStore:
    """The runs directory: creates, reads and updates runs."""

    root: Path
    _last_id: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    def ensure_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def run_dir(self, run_id: str) -> Path:
        """The directory of run `run_id`; refuses ids that could point outside the runs dir."""
        if not isinstance(run_id, str) or not RUN_ID_PATTERN.match(run_id) or run_id in (".", ".."):
            raise RunNotFound(f"not a run id: {run_id!r}")
        path = self.root / run_id
        # A run directory is a real directory inside the runs dir, and its state file a regular
        # file in it: a symlink planted at either (pointing anywhere) is not a run, so no
        # download or delete can act outside. (Each later open checks again: see safe_files.)
        if not safe_files.is_regular_file(path, STATE_FILE):
            raise RunNotFound(f"no run {run_id!r} in {self.root}")
        return path

    def new_run_id(self, name: str) -> str:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = f"{stamp}-{name}" if name else stamp
        candidate, n = base, 1
        while (self.root / candidate).exists() or candidate == self._last_id:
            n += 1
            candidate = f"{base}-{n}"
        self._last_id = candidate
        return candidate

    def create(
        self, name: str, preset: str, model: str, files: dict[str, str], run_id: str | None = None, kind: str = "train", source_run: str = ""
    ) -> RunState:
        """A new run directory holding `files` (name -> text) and its first state (its kind
        in it from the start: no moment exists where an evaluation reads as a training)."""
        self.ensure_root()
        run_id = run_id or self.new_run_id(name)
        if (self.root / run_id).exists():
            raise FileExistsError(f"run {run_id} already exists")
        state = RunState(
            id=run_id,
            name=name or run_id,
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            preset=preset,
            model=model,
            kind=kind,
            source_run=source_run,
        )
        staging = Path(tempfile.mkdtemp(prefix=".new-", dir=self.root))
        try:
            # Plain writes: nobody reads the hidden staging dir, and the run appears whole
            # (files and state together) with the one rename below.
            for filename, text in {**files, STATE_FILE: json.dumps(state.to_json(), indent=2)}.items():
                (staging / filename).write_text(text, encoding="utf-8")
            os.rename(staging, self.root / run_id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return state

    def read(self, run_id: str) -> RunState:
        run_dir = self.run_dir(run_id)
        try:
            return RunState.from_json(json.loads(safe_files.read_text(run_dir, STATE_FILE, SMALL_FILE_MAX_BYTES)))
        except (OSError, ValueError, TypeError, AttributeError) as error:
            raise RunNotFound(f"run {run_id!r} has an unreadable state file: {error}") from None

    def update(self, run_id: str, **changes: Any) -> RunState:
        state = replace(self.read(run_id), **changes)
        safe_files.write_atomic(self.run_dir(run_id), STATE_FILE, json.dumps(state.to_json(), indent=2).encode("utf-8"))
        return state

    def list(self) -> list[RunState]:
        """Every readable run, newest first; unreadable ones are skipped."""
        if not self.root.is_dir():
            return []
        states = []
        for name in os.listdir(self.root):
            if name.startswith("."):
                continue
            try:
                states.append(self.read(name))
            except RunNotFound:
                continue
        states.sort(key=lambda s: (s.created, s.id), reverse=True)
        return states

    def read_form(self, run_id: str) -> dict[str, Any]:
        try:
            form = json.loads(safe_files.read_text(self.run_dir(run_id), FORM_FILE, SMALL_FILE_MAX_BYTES))
        except (OSError, ValueError):
            return {}
        return form if isinstance(form, dict) else {}

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
