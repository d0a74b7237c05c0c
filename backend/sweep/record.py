"""A sweep's record on disk: `<runs>/sweeps/<id>.json`, written whole (atomically, under a
name nobody can guess, renamed over the old one) and read without following a link, at most
SWEEP_FILE_MAX bytes, strictly typed: a record that is not one reads as no sweep.

What it holds: the spec (fields and values as typed, seeds), the base form the runs were
made from (so runs can be added later), and each run's id, name and values. The runs' own
state is in their run directories; the record never repeats it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from backend.runs import safe_files

SWEEPS_DIR = "sweeps"
SWEEP_FILE_MAX = 1024 * 1024  # 64 runs' values and one form: a few tens of kB
_ID = re.compile(r"sweep-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")


class SweepNotFound(LookupError):
    pass


@dataclass(frozen=True)
class SweepMember:
    run_id: str
    name: str
    values: tuple[tuple[str, Any], ...]

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "name": self.name, "values": [[k, v] for k, v in self.values]}


@dataclass(frozen=True)
class SweepRecord:
    id: str
    name: str
    created: str
    axes: tuple[tuple[str, tuple[Any, ...]], ...]  # (field, values as typed)
    seeds: int
    base_form: dict[str, Any] = field(hash=False)
    runs: tuple[SweepMember, ...] = ()
    metric: str = "final_loss"
    finished_at: float | None = None  # when its last run was seen ended (the notice was sent then)
    early_stop: tuple[int, float] | None = None  # (K eval points, margin): backend/sweep/view.py's rule; None: off

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "created": self.created,
            "axes": [[name, list(values)] for name, values in self.axes],
            "seeds": self.seeds,
            "base_form": self.base_form,
            "runs": [run.to_json() for run in self.runs],
            "metric": self.metric,
            "finished_at": self.finished_at,
            "early_stop": list(self.early_stop) if self.early_stop else None,
        }


def new_sweep_id() -> str:
    return f"sweep-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


def valid_id(sweep_id: str) -> bool:
    return isinstance(sweep_id, str) and _ID.fullmatch(sweep_id) is not None


def _relative(sweep_id: str) -> str:
    if not valid_id(sweep_id):
        raise SweepNotFound(sweep_id)
    return f"{SWEEPS_DIR}/{sweep_id}.json"


def write_record(root: Path, record: SweepRecord) -> None:
    safe_files.make_dir(root, SWEEPS_DIR)
    data = json.dumps(record.to_json(), indent=1, ensure_ascii=False).encode("utf-8")
    if len(data) > SWEEP_FILE_MAX:
        raise ValueError(f"a sweep record of {len(data)} bytes is larger than {SWEEP_FILE_MAX}")
    safe_files.write_atomic(root, _relative(record.id), data)


def _pairs(value: Any) -> tuple[tuple[str, Any], ...]:
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in value):
        raise ValueError("values")
    return tuple((p[0], p[1]) for p in value)


def parse_record(data: Any, sweep_id: str) -> SweepRecord:
    """The record in `data` (a decoded JSON object); ValueError for anything else."""
    if not isinstance(data, dict) or data.get("id") != sweep_id:
        raise ValueError("not this sweep's record")
    axes_raw = data.get("axes")
    if not isinstance(axes_raw, list) or not all(isinstance(a, list) and len(a) == 2 and isinstance(a[0], str) and isinstance(a[1], list) for a in axes_raw):
        raise ValueError("axes")
    runs_raw = data.get("runs")
    if not isinstance(runs_raw, list):
        raise ValueError("runs")
    runs = []
    for run in runs_raw:
        if not isinstance(run, dict) or not isinstance(run.get("run_id"), str) or not isinstance(run.get("name"), str):
            raise ValueError("run")
        runs.append(SweepMember(run["run_id"], run["name"], _pairs(run.get("values"))))
    seeds, base_form, metric, finished = data.get("seeds"), data.get("base_form"), data.get("metric", "final_loss"), data.get("finished_at")
    if not isinstance(seeds, int) or isinstance(seeds, bool) or not isinstance(base_form, dict) or not isinstance(metric, str):
        raise ValueError("fields")
    if finished is not None and not isinstance(finished, (int, float)):
        raise ValueError("finished_at")
    early = data.get("early_stop")
    if early is not None:
        if not (isinstance(early, list) and len(early) == 2 and isinstance(early[0], int) and not isinstance(early[0], bool) and isinstance(early[1], (int, float)) and not isinstance(early[1], bool)):
            raise ValueError("early_stop")
        early = (early[0], float(early[1]))
    name, created = data.get("name"), data.get("created")
    if not isinstance(name, str) or not isinstance(created, str):
        raise ValueError("name")
    return SweepRecord(sweep_id, name, created, tuple((a[0], tuple(a[1])) for a in axes_raw), seeds, base_form, tuple(runs), metric, finished, early)


def read_record(root: Path, sweep_id: str) -> SweepRecord:
    """The sweep's record; SweepNotFound when there is none (or none that reads as one)."""
    relative = _relative(sweep_id)
    try:
        data = json.loads(safe_files.read_bytes(root, relative, SWEEP_FILE_MAX))
        return parse_record(data, sweep_id)
    except (OSError, ValueError, RecursionError) as error:  # UnsafePath is an OSError
        raise SweepNotFound(sweep_id) from error


def record_times(root: Path) -> dict[str, int]:
    """Each recorded sweep's id -> its record's mtime (ns): what changed since a last look."""
    try:
        entries = safe_files.list_dir(root, SWEEPS_DIR)
    except OSError:
        return {}
    stamps = {name[: -len(".json")]: stat.st_mtime_ns for name, stat in entries if name.endswith(".json")}
    return {sweep_id: stamp for sweep_id, stamp in stamps.items() if valid_id(sweep_id)}


def list_sweeps(root: Path) -> list[str]:
    """The ids of the sweeps recorded under `root`, newest first."""
    try:
        entries = safe_files.list_dir(root, SWEEPS_DIR)
    except OSError:
        return []
    ids = [name[: -len(".json")] for name, _ in entries if name.endswith(".json")]
    return sorted((i for i in ids if valid_id(i)), reverse=True)


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """Held while a record is read, changed and written back, across processes (the app, `app.py
    sweep --wait`, a second app on the same runs directory): an flock of the sweeps folder
    itself, so a sweep's end is recorded (and said) once."""
    safe_files.make_dir(root, SWEEPS_DIR)
    fd = safe_files.open_dir_in_run(root, SWEEPS_DIR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def now() -> float:
    return time.time()


__all__ = ["SWEEPS_DIR", "SweepMember", "SweepNotFound", "SweepRecord", "list_sweeps", "locked", "new_sweep_id", "read_record", "record_times", "valid_id", "write_record"]
