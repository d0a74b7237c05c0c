"""Resume a stopped or failed run from its latest complete checkpoint, losing nothing.

What LLaMA-Factory 0.9.5 and transformers 5.6 do, and why each step below exists:

- The run's first config has `overwrite_output_dir: true`. With it, LLaMA-Factory's
  LogCallback.on_init_end *deletes* output/trainer_log.jsonl before training. A resume
  therefore writes `overwrite_output_dir: false`, and the trainer appends to the log. (With
  `resume_from_checkpoint` set, LLaMA-Factory's "output directory is not empty" check is
  skipped, so `false` is safe.)
- The resumed trainer logs again from the checkpoint's step: the file then reads
  `... 12, 13, 11, 12, ...`. MetricSeries drops the superseded points when it meets a
  repeated step, so every reader (live, or fresh after a restart) sees one gap-free curve.
- The trainer writes each log line from a thread pool; a `kill -9` can leave the last line
  half written, or lose the lines of the steps just before a checkpoint. Before a resume
  the half line is closed with a newline (so the resumed trainer's first line is not glued
  onto it and lost), and the steps the checkpoint holds but the log lacks are appended from
  the checkpoint's own `trainer_state.json` log history (so the curve has no gap).
- With LLAMABOARD_ENABLED=1 the trainer deletes output/running_log.txt at start, and at its
  end it rewrites the adapter and the results files in output/. The previous attempt's
  files are therefore copied to `attempts/<n>/` first (with its config.yaml and state.json).
- Checkpoints are written in place, weights first and `trainer_state.json` last (transformers
  Trainer._save_checkpoint); a checkpoint directory without a readable trainer_state.json
  or without its weights is half written and is never resumed from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from backend.findings import Finding
from backend.logs import TRAINER_LOG
from backend.runs import (
    CONFIG_FILE,
    LOG_FILE,
    OUTPUT_DIR,
    STATE_FILE,
    RunNotFound,
    RunState,
    RunStore,
)

CHECKPOINT_DIR_PATTERN = re.compile(r"^checkpoint-(\d+)$")
TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME, written last
# Any one of these means the checkpoint's weights were written (adapter for LoRA, model for
# full/freeze; index files for sharded weights, whose shards are checked too).
WEIGHT_FILES = (
    "adapter_model.safetensors",
    "adapter_model.bin",
    "model.safetensors",
    "pytorch_model.bin",
)
WEIGHT_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")

ATTEMPTS_DIR = "attempts"  # runs/<id>/attempts/<n>/: what attempt n left before a resume
MANIFEST_FILE = "manifest.json"
# A previous attempt's output/ files are copied up to this size each: LoRA adapters, logs,
# results. Larger ones (full fine-tuning weights) are listed in the manifest, not copied:
# their step is kept in the checkpoint the resume starts from.
ARCHIVE_MAX_FILE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint directory, read from its trainer_state.json."""

    path: Path
    step: int  # global_step, equal to the N of checkpoint-N
    max_steps: int | None  # the run's total steps, when the trainer knew it
    log_history: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class ResumePlan:
    run_id: str
    checkpoint: Path  # absolute path of the checkpoint directory
    checkpoint_step: int
    total_steps: int | None
    logged_step: int | None  # the last step the previous attempt logged
    attempt: int  # the number the resumed attempt will have (2 for the first resume)
    skipped: tuple[str, ...] = ()  # newer checkpoint directories skipped as half written

    def describe(self) -> str:
        total = f" of {self.total_steps}" if self.total_steps else ""
        text = f"Resumes from {self.checkpoint.name} (step {self.checkpoint_step}{total}) as attempt {self.attempt}."
        if self.logged_step is not None and self.logged_step > self.checkpoint_step:
            text += f" Steps {self.checkpoint_step + 1}–{self.logged_step} are trained again."
        if self.skipped:
            text += f" Skipped as incomplete: {', '.join(self.skipped)}."
        return text


@dataclass(frozen=True)
class Refusal:
    """Why a run cannot be resumed, and what to do instead."""

    run_id: str
    problem: str
    fix: str
    rule: str  # run-missing, run-active, run-finished, no-config, no-checkpoint, all-steps-done

    def finding(self) -> Finding:
        return Finding("resume", self.problem, self.fix, rule=f"resume-{self.rule}")


class ResumeRefused(RuntimeError):
    def __init__(self, refusal: Refusal):
        super().__init__(f"{refusal.problem} Fix: {refusal.fix}")
        self.refusal = refusal


# --- checkpoints ---------------------------------------------------------------------


def _regular_file(path: Path) -> bool:
    try:
        return path.is_file() and not path.is_symlink()
    except OSError:
        return False


def _has_weights(directory: Path) -> bool:
    if any(_regular_file(directory / name) and (directory / name).stat().st_size > 0 for name in WEIGHT_FILES):
        return True
    for index_name in WEIGHT_INDEX_FILES:
        index = directory / index_name
        if not _regular_file(index):
            continue
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if shards and all(_regular_file(directory / shard) for shard in shards):
            return True
    return False


def checkpoint_info(path: Path) -> CheckpointInfo | None:
    """The checkpoint at `path` if it is complete, else None (half written, or not one)."""
    match = CHECKPOINT_DIR_PATTERN.match(path.name)
    if match is None or path.is_symlink() or not path.is_dir():
        return None
    state_file = path / TRAINER_STATE_FILE
    if not _regular_file(state_file):
        return None
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # cut off mid-write
    if not isinstance(state, dict) or state.get("global_step") != int(match.group(1)):
        return None
    if not _has_weights(path):
        return None
    max_steps = state.get("max_steps")
    history = state.get("log_history")
    return CheckpointInfo(
        path=path,
        step=int(match.group(1)),
        max_steps=max_steps if isinstance(max_steps, int) and max_steps > 0 else None,
        log_history=tuple(h for h in history if isinstance(h, dict)) if isinstance(history, list) else (),
    )


def _checkpoint_dirs(run_dir: Path) -> list[Path]:
    """checkpoint-N directories of the run's output, highest N first."""
    output = Path(run_dir) / OUTPUT_DIR
    try:
        entries = [entry for entry in output.iterdir() if CHECKPOINT_DIR_PATTERN.match(entry.name)]
    except OSError:
        return []
    return sorted(entries, key=lambda entry: int(CHECKPOINT_DIR_PATTERN.match(entry.name).group(1)), reverse=True)  # type: ignore[union-attr]


def latest_complete_checkpoint(run_dir: Path) -> tuple[CheckpointInfo | None, tuple[str, ...]]:
    """(the newest complete checkpoint, names of newer ones skipped as half written)."""
    skipped: list[str] = []
    for path in _checkpoint_dirs(run_dir):
        info = checkpoint_info(path)
        if info is not None:
            return info, tuple(skipped)
        skipped.append(path.name)
    return None, tuple(skipped)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint-N of the run that was written completely (trainer_state.json
    readable and naming step N, weights present), or None."""
    info, _ = latest_complete_checkpoint(run_dir)
    return info.path if info is not None else None


# --- the trainer log -----------------------------------------------------------------


def _log_records(path: Path) -> tuple[list[dict[str, Any]], bool]:
    """(the parseable records of a trainer log, whether its last line is cut off)."""
    try:
        data = path.read_bytes()
    except OSError:
        return [], False
    records = []
    for line in data.split(b"\n"):
        try:
            record = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(record, dict) and isinstance(record.get("current_steps"), int):
            records.append(record)
    return records, bool(data) and not data.endswith(b"\n")


def _last_logged_step(path: Path) -> int | None:
    records, _ = _log_records(path)
    return records[-1]["current_steps"] if records else None


def recovered_records(checkpoint: CheckpointInfo, after_step: int) -> list[dict[str, Any]]:
    """Trainer-log records for the logged steps in (after_step, checkpoint.step], rebuilt
    from the checkpoint's log history (the steps a kill -9 kept out of the log)."""
    records = []
    total = checkpoint.max_steps or 0
    for entry in checkpoint.log_history:
        step = entry.get("step")
        if not isinstance(step, int) or not (after_step < step <= checkpoint.step) or "loss" not in entry:
            continue
        record = {
            "current_steps": step,
            "total_steps": total,
            "loss": entry.get("loss"),
            "lr": entry.get("learning_rate"),
            "epoch": entry.get("epoch"),
            "percentage": round(step / total * 100, 2) if total else 100,
            "elapsed_time": "",
            "remaining_time": "",
            "recovered_from": checkpoint.path.name,  # said, so nobody mistakes it for a live line
        }
        records.append({k: v for k, v in record.items() if v is not None})
    records.sort(key=lambda r: r["current_steps"])
    return records


def repair_trainer_log(output_dir: Path, checkpoint: CheckpointInfo) -> list[int]:
    """Makes the log safe to append to, and gap-free up to the checkpoint; returns the steps
    it appended. Only appends: not a byte already in the file changes."""
    path = Path(output_dir) / TRAINER_LOG
    records, cut_off = _log_records(path)
    last = records[-1]["current_steps"] if records else 0
    missing = recovered_records(checkpoint, last)
    if not cut_off and not missing:
        return []
    with open(path, "a", encoding="utf-8") as handle:
        if cut_off:
            handle.write("\n")  # the half line stays (a reader skips it as garbage), closed
        handle.writelines(json.dumps(record) + "\n" for record in missing)
    return [r["current_steps"] for r in missing]


# --- plan and prepare ----------------------------------------------------------------


def resume_plan(store: RunStore, run_id: str) -> ResumePlan | Refusal:
    """What a resume of `run_id` would do, or why it cannot be resumed.

    Reads the state file as it is: the caller settles a stale "running" first
    (Launcher.refresh, as RocBoard.active_run does)."""
    try:
        state = store.read(run_id)
        run_dir = store.run_dir(run_id)
    except RunNotFound as error:
        return Refusal(str(run_id), f"There is no run {run_id!r} to resume ({error}).", "Pick a run from the Runs list.", "run-missing")
    if state.active:
        return Refusal(
            run_id,
            f"Run {run_id} is still {state.state}; a run that trains cannot be resumed.",
            "Wait for it to end, or stop it first.",
            "run-active",
        )
    if state.state == "finished":
        return Refusal(
            run_id,
            f"Run {run_id} finished all its steps; resuming it would train past its end.",
            "To train further, start a new run (with more steps, or from its adapter).",
            "run-finished",
        )
    if not _regular_file(run_dir / CONFIG_FILE) or not isinstance(_config_args(run_dir), dict):
        return Refusal(run_id, f"Run {run_id} has no {CONFIG_FILE}, so it cannot be started again.", "Start a new run with the same settings.", "no-config")
    info, skipped = latest_complete_checkpoint(run_dir)
    logged = _last_logged_step(run_dir / OUTPUT_DIR / TRAINER_LOG)
    if info is None:
        save_steps = _config_value(run_dir, "save_steps")
        every = ""
        if save_steps:
            every = f" (it saves one every {save_steps} steps" + (f"; it ended at step {logged})" if logged else ")")
        half = f" Incomplete, not used: {', '.join(skipped)}." if skipped else ""
        return Refusal(
            run_id,
            f"Run {run_id} has no complete checkpoint to resume from{every}.{half}",
            "Start it again from the beginning; to be able to resume sooner, lower Save steps.",
            "no-checkpoint",
        )
    if info.max_steps is not None and info.step >= info.max_steps:
        return Refusal(
            run_id,
            f"{info.path.name} of run {run_id} already holds all {info.max_steps} steps; there is nothing left to train.",
            f"Use the adapter in {OUTPUT_DIR}/{info.path.name}/, or start a new run with more steps.",
            "all-steps-done",
        )
    return ResumePlan(
        run_id=run_id,
        checkpoint=info.path.resolve(),
        checkpoint_step=info.step,
        total_steps=info.max_steps,
        logged_step=logged,
        attempt=state.attempts + 1,
        skipped=skipped,
    )


def _config_args(run_dir: Path) -> Any:
    try:
        return yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None


def _config_value(run_dir: Path, key: str) -> Any:
    data = _config_args(run_dir)
    return data.get(key) if isinstance(data, dict) else None


def archive_attempt(run_dir: Path, attempt: int) -> Path:
    """Copies what attempt `attempt` left (config.yaml, state.json, the files directly in
    output/) to attempts/<attempt>/, assembled under a hidden name and renamed into place."""
    attempts = Path(run_dir) / ATTEMPTS_DIR
    attempts.mkdir(exist_ok=True)
    target = attempts / str(attempt)
    n = 1
    while target.exists():  # an earlier resume of this attempt failed to launch: keep both
        n += 1
        target = attempts / f"{attempt}-{n}"
    staging = Path(tempfile.mkdtemp(prefix=".new-", dir=attempts))
    copied: list[str] = []
    not_copied: list[dict[str, Any]] = []
    try:
        for name in (CONFIG_FILE, STATE_FILE):
            if _regular_file(run_dir / name):
                shutil.copy2(run_dir / name, staging / name)
                copied.append(name)
        output = Path(run_dir) / OUTPUT_DIR
        if output.is_dir():
            (staging / OUTPUT_DIR).mkdir()
            for entry in sorted(output.iterdir()):
                if not _regular_file(entry):
                    continue  # checkpoint dirs stay where they are, untouched
                size = entry.stat().st_size
                if size > ARCHIVE_MAX_FILE_BYTES:
                    not_copied.append({"file": f"{OUTPUT_DIR}/{entry.name}", "bytes": size, "why": "larger than the archive limit"})
                    continue
                shutil.copy2(entry, staging / OUTPUT_DIR / entry.name)
                copied.append(f"{OUTPUT_DIR}/{entry.name}")
        manifest = {
            "attempt": attempt,
            "archived_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "copied": copied,
            "not_copied": not_copied,
        }
        (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def resume_config(config_text: str, checkpoint: Path, output_dir: Path) -> str:
    """The run's YAML with the keys that make LLaMA-Factory continue instead of restart."""
    args = yaml.safe_load(config_text)
    if not isinstance(args, dict):
        raise ValueError("config.yaml does not hold a mapping of LLaMA-Factory arguments")
    args["output_dir"] = str(output_dir)  # the run's own, even if the runs dir was moved
    args["resume_from_checkpoint"] = str(checkpoint)
    args["overwrite_output_dir"] = False  # True makes LLaMA-Factory delete trainer_log.jsonl
    return yaml.safe_dump(args, sort_keys=False, allow_unicode=True)


def prepare_resume(store: RunStore, run_id: str, plan: ResumePlan | None = None) -> RunState:
    """Readies `run_id` to be launched again from its latest complete checkpoint: archives
    the previous attempt, repairs the log, rewrites config.yaml, bumps `attempts` and
    records `resumed_from`. Leaves the state itself (stopped/failed) for the launcher's
    start to change. Raises ResumeRefused when the run cannot be resumed."""
    if plan is None:
        found = resume_plan(store, run_id)
        if isinstance(found, Refusal):
            raise ResumeRefused(found)
        plan = found
    run_dir = store.run_dir(run_id)
    state = store.read(run_id)
    info = checkpoint_info(plan.checkpoint)
    if info is None:
        raise ResumeRefused(Refusal(run_id, f"{plan.checkpoint.name} is no longer a complete checkpoint.", "Ask for the resume again.", "no-checkpoint"))
    archive_attempt(run_dir, state.attempts)
    output = run_dir / OUTPUT_DIR
    recovered = repair_trainer_log(output, info)
    config_path = run_dir / CONFIG_FILE
    _write_text_atomic(config_path, resume_config(config_path.read_text(encoding="utf-8"), plan.checkpoint, output))
    relative = plan.checkpoint.relative_to(run_dir.resolve()) if plan.checkpoint.is_relative_to(run_dir.resolve()) else plan.checkpoint
    note = f"attempt {plan.attempt} resumes from {relative} (step {plan.checkpoint_step}"
    note += f" of {plan.total_steps})" if plan.total_steps else ")"
    if recovered:
        note += f"; steps {recovered[0]}–{recovered[-1]} recovered into the log from the checkpoint"
    with open(run_dir / LOG_FILE, "a", encoding="utf-8") as log:
        log.write(f"\n===== RocBoard: {note} =====\n")
    return store.update(run_id, attempts=plan.attempt, resumed_from=str(relative))


__all__ = [
    "ATTEMPTS_DIR",
    "CheckpointInfo",
    "Refusal",
    "ResumePlan",
    "ResumeRefused",
    "archive_attempt",
    "checkpoint_info",
    "latest_checkpoint",
    "latest_complete_checkpoint",
    "prepare_resume",
    "recovered_records",
    "repair_trainer_log",
    "resume_config",
    "resume_plan",
]
