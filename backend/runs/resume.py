"""Resume a stopped or failed run from its latest complete checkpoint, losing nothing.

What LLaMA-Factory 0.9.5 and transformers 5.6 do, and why each step below exists:

- The run's first config has `overwrite_output_dir: true`. With it, LLaMA-Factory's
  LogCallback.on_init_end *deletes* output/trainer_log.jsonl before training. A resume
  therefore writes `overwrite_output_dir: false`, and the trainer appends to the log. (With
  `resume_from_checkpoint` set, LLaMA-Factory's "output directory is not empty" check is
  skipped, so `false` is safe.)
- The resumed trainer logs again from the checkpoint's step: the file then reads
  `... 12, 13, 11, 12, ...`. Before it starts, RocBoard appends one line of its own that
  says which attempt begins after which step, with the tokens the checkpoint had counted
  (`{"rocboard_attempt": 2, "resumed_from_step": 10, ...}`, backend.runs.logs.AttemptStart):
  every reader (live, or fresh after a restart) cuts the curve back to the checkpoint there,
  marks where the attempt began, and counts the attempt's tokens per second on its own.
  MetricSeries also drops superseded points when it meets a repeated step (a log resumed
  before that line existed), so the curve is gap-free either way.
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

Every file of the run is reached without following a link (backend.runs.safe_files): a checkpoint,
log, config or output file planted as a symlink is no checkpoint, no log, and is neither
read, appended to, nor archived. The trainer log is only ever read at its end (bounded).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from backend.findings import Finding
from backend.i18n import DEFAULT_LOCALE, Message, render_message
from backend.runs import (
    CONFIG_FILE,
    LOG_FILE,
    OUTPUT_DIR,
    SMALL_FILE_MAX_BYTES,
    STATE_FILE,
    RunNotFound,
    RunState,
    RunStore,
    safe_files,
)
from backend.runs.logs import AttemptStart
from backend.runs.trainer_log import append_records, log_path, mark_attempt, read_log_tail

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
# trainer_state.json holds the whole log history: ~200 bytes a logged step.
TRAINER_STATE_MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class CheckpointInfo:
    """A complete checkpoint directory, read from its trainer_state.json."""

    path: Path
    step: int  # global_step, equal to the N of checkpoint-N
    max_steps: int | None  # the run's total steps, when the trainer knew it
    log_history: tuple[dict[str, Any], ...]
    tokens: int | None = None  # num_input_tokens_seen: the tokens trained up to this step, when counted


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
    """Why a run cannot be resumed, and what to do instead: a message id and its values, so
    the page says it in its own language (`text(locale)`, `finding()`)."""

    run_id: str
    rule: str  # run-missing, run-active, run-finished, no-config, no-checkpoint, all-steps-done
    # The words are the catalogue's `check.<message>.problem` / `.fix` ("resume-<rule>", or
    # "resume-checkpoint-gone" for a checkpoint that broke after the plan).
    message: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def message_id(self) -> str:
        return self.message or f"resume-{self.rule}"

    def text(self, locale: str = DEFAULT_LOCALE) -> tuple[str, str]:
        """(problem, fix) in `locale`."""
        return (
            render_message(f"check.{self.message_id}.problem", self.params, locale),
            render_message(f"check.{self.message_id}.fix", self.params, locale),
        )

    @property
    def problem(self) -> str:  # English: the command line, logs, the exception's text
        return self.text()[0]

    @property
    def fix(self) -> str:
        return self.text()[1]

    def finding(self) -> Finding:
        """The refusal as a finding about the resume, in any locale."""
        return Finding.of("resume", f"resume-{self.rule}", message=self.message_id, **self.params)


class ResumeRefused(RuntimeError):
    def __init__(self, refusal: Refusal):
        super().__init__(f"{refusal.problem} Fix: {refusal.fix}")
        self.refusal = refusal


# --- checkpoints ---------------------------------------------------------------------


def _regular_file(root: Path, relative: str | Path) -> os.stat_result | None:
    """lstat of a regular file inside `root` reached without following links, else None."""
    found = safe_files.lstat_in_run(root, relative)
    return found if found is not None and stat.S_ISREG(found.st_mode) else None


def _has_weights(root: Path, directory: Path) -> bool:
    """Whether the checkpoint `directory` (relative to `root`) holds its weights."""
    if any((found := _regular_file(root, directory / name)) is not None and found.st_size > 0 for name in WEIGHT_FILES):
        return True
    for index_name in WEIGHT_INDEX_FILES:
        try:
            shards = set(json.loads(safe_files.read_text(root, directory / index_name, SMALL_FILE_MAX_BYTES * 16))["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if shards and all(isinstance(shard, str) and "/" not in shard and _regular_file(root, directory / shard) for shard in shards):
            return True
    return False


def checkpoint_info(path: Path, run_dir: Path | None = None) -> CheckpointInfo | None:
    """The checkpoint at `path` if it is complete, else None (half written, or not one).
    Inside `run_dir` (default: the checkpoint's parent) no link on the way is followed."""
    match = CHECKPOINT_DIR_PATTERN.match(path.name)
    if match is None:
        return None
    root = Path(run_dir) if run_dir is not None else path.parent
    try:
        relative = path.relative_to(root)
    except ValueError:
        return None
    if not safe_files.is_directory(root, relative):
        return None
    try:
        state = json.loads(safe_files.read_text(root, relative / TRAINER_STATE_FILE, TRAINER_STATE_MAX_BYTES))
    except (OSError, ValueError):
        return None  # missing, a link, too large, or cut off mid-write
    if not isinstance(state, dict) or state.get("global_step") != int(match.group(1)):
        return None
    if not _has_weights(root, relative):
        return None
    max_steps = state.get("max_steps")
    history = state.get("log_history")
    tokens = state.get("num_input_tokens_seen")
    return CheckpointInfo(
        path=path,
        step=int(match.group(1)),
        max_steps=max_steps if isinstance(max_steps, int) and max_steps > 0 else None,
        log_history=tuple(h for h in history if isinstance(h, dict)) if isinstance(history, list) else (),
        tokens=tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else None,
    )


def _checkpoint_dirs(run_dir: Path) -> list[Path]:
    """checkpoint-N directories of the run's output (real directories, not links), highest N first."""
    output = Path(run_dir) / OUTPUT_DIR
    entries = [(int(match.group(1)), output / name) for name, found in safe_files.list_dir(run_dir, OUTPUT_DIR) if (match := CHECKPOINT_DIR_PATTERN.match(name)) and stat.S_ISDIR(found.st_mode)]
    return [path for _, path in sorted(entries, key=lambda entry: entry[0], reverse=True)]


def latest_complete_checkpoint(run_dir: Path) -> tuple[CheckpointInfo | None, tuple[str, ...]]:
    """(the newest complete checkpoint, names of newer ones skipped as half written)."""
    skipped: list[str] = []
    for path in _checkpoint_dirs(run_dir):
        info = checkpoint_info(path, run_dir)
        if info is not None:
            return info, tuple(skipped)
        skipped.append(path.name)
    return None, tuple(skipped)


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest checkpoint-N of the run that was written completely (trainer_state.json
    readable and naming step N, weights present), or None."""
    info, _ = latest_complete_checkpoint(run_dir)
    return info.path if info is not None else None


# --- the trainer log: read and appended to through backend.runs.trainer_log ---------------


def _last_logged_step(run_dir: Path) -> int | None:
    return read_log_tail(log_path(run_dir), run_dir, loss=False).step


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
    it appended. Only appends: not a byte already in the file changes. (The log is opened
    inside the run without following a link; a planted link is refused, never appended to.)"""
    run_dir = Path(output_dir).parent
    end = read_log_tail(log_path(run_dir), run_dir, loss=False)  # the last step logged; a half-written last line
    missing = recovered_records(checkpoint, end.step or 0)
    if not end.cut_off and not missing:
        return []
    append_records(run_dir, missing, close_cut_line=end.cut_off)  # a half line stays, closed
    return [r["current_steps"] for r in missing]


# --- plan and prepare ----------------------------------------------------------------


def resume_plan(store: RunStore, run_id: str, state: RunState | None = None) -> ResumePlan | Refusal:
    """What a resume of `run_id` would do, or why it cannot be resumed.

    Reads the state file as it is, unless the caller gives the run's settled `state` (a
    trainer that just died is "failed" before its state file says so): the caller settles a
    stale "running" first (Launcher.refresh, as RocBoard.active_run does)."""
    try:
        state = state if state is not None else store.read(run_id)
        run_dir = store.run_dir(run_id)
    except RunNotFound as error:
        # The error names the run id as the store saw it (shown as written).
        return Refusal(str(run_id), "run-missing", params={"run_id": repr(run_id), "error": str(error)})
    if state.active:
        return Refusal(run_id, "run-active", params={"run_id": run_id, "state": Message(f"state.{state.state}")})
    if state.state == "finished":
        return Refusal(run_id, "run-finished", params={"run_id": run_id})
    if not isinstance(_config_args(run_dir), dict):
        return Refusal(run_id, "no-config", params={"run_id": run_id, "file": CONFIG_FILE})
    info, skipped = latest_complete_checkpoint(run_dir)
    logged = _last_logged_step(run_dir)
    if info is None:
        save_steps = _config_value(run_dir, "save_steps")
        # Clauses of the sentence, each a message of its own (empty when it does not apply).
        every: Message | str = ""
        if save_steps:
            every = Message("resume.saves-every-ended", save_steps=save_steps, step=logged) if logged else Message("resume.saves-every", save_steps=save_steps)
        half: Message | str = Message("resume.incomplete-skipped", names=", ".join(skipped)) if skipped else ""
        return Refusal(run_id, "no-checkpoint", params={"run_id": run_id, "every": every, "skipped": half})
    if info.max_steps is not None and info.step >= info.max_steps:
        return Refusal(
            run_id,
            "all-steps-done",
            params={"run_id": run_id, "checkpoint": info.path.name, "steps": info.max_steps, "output": OUTPUT_DIR},
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
        return yaml.safe_load(safe_files.read_text(run_dir, CONFIG_FILE, SMALL_FILE_MAX_BYTES))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None


def _config_value(run_dir: Path, key: str) -> Any:
    data = _config_args(run_dir)
    return data.get(key) if isinstance(data, dict) else None


def archive_attempt(run_dir: Path, attempt: int) -> Path:
    """Copies what attempt `attempt` left (config.yaml, state.json, the regular files directly
    in output/) to attempts/<attempt>/, assembled under a hidden, unpredictable name and
    renamed into place. Nothing is reached through a link: a planted link is not copied."""
    run_dir = Path(run_dir)
    safe_files.make_dir(run_dir, ATTEMPTS_DIR)
    name = str(attempt)
    n = 1
    while safe_files.lstat_in_run(run_dir, f"{ATTEMPTS_DIR}/{name}") is not None:
        n += 1  # an earlier resume of this attempt failed to launch: keep both
        name = f"{attempt}-{n}"
    staging = f".new-{secrets.token_hex(8)}"
    attempts_fd = safe_files.open_dir_in_run(run_dir, ATTEMPTS_DIR)
    copied: list[str] = []
    not_copied: list[dict[str, Any]] = []

    def copy(relative: str) -> None:
        with safe_files.opened(run_dir, relative) as source:
            fd = safe_files.open_in_run(run_dir, f"{ATTEMPTS_DIR}/{staging}/{relative}", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            with os.fdopen(fd, "wb") as target:
                shutil.copyfileobj(source, target, 1024 * 1024)
        copied.append(relative)

    try:
        os.mkdir(staging, 0o755, dir_fd=attempts_fd)
        for relative in (CONFIG_FILE, STATE_FILE):
            if _regular_file(run_dir, relative) is not None:
                copy(relative)
        if safe_files.is_directory(run_dir, OUTPUT_DIR):
            safe_files.make_dir(run_dir, f"{ATTEMPTS_DIR}/{staging}/{OUTPUT_DIR}")
            for entry, found in sorted(safe_files.list_dir(run_dir, OUTPUT_DIR), key=lambda item: item[0]):
                if not stat.S_ISREG(found.st_mode):
                    continue  # checkpoint dirs stay where they are, untouched; links are not followed
                if found.st_size > ARCHIVE_MAX_FILE_BYTES:
                    not_copied.append({"file": f"{OUTPUT_DIR}/{entry}", "bytes": found.st_size, "why": "larger than the archive limit"})
                    continue
                try:
                    copy(f"{OUTPUT_DIR}/{entry}")
                except safe_files.UnsafePath:
                    continue  # replaced by a link (or something else) since the listing
        manifest = {
            "attempt": attempt,
            "archived_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "copied": copied,
            "not_copied": not_copied,
        }
        safe_files.write_atomic(run_dir, f"{ATTEMPTS_DIR}/{staging}/{MANIFEST_FILE}", json.dumps(manifest, indent=2).encode("utf-8"))
        os.rename(staging, name, src_dir_fd=attempts_fd, dst_dir_fd=attempts_fd)
    except BaseException:
        shutil.rmtree(staging, dir_fd=attempts_fd, ignore_errors=True)
        raise
    finally:
        os.close(attempts_fd)
    return run_dir / ATTEMPTS_DIR / name


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
    info = checkpoint_info(plan.checkpoint, run_dir.resolve())
    if info is None:
        raise ResumeRefused(Refusal(run_id, "no-checkpoint", message="resume-checkpoint-gone", params={"checkpoint": plan.checkpoint.name}))
    archive_attempt(run_dir, state.attempts)
    output = run_dir / OUTPUT_DIR
    recovered = repair_trainer_log(output, info)
    mark_attempt(run_dir, AttemptStart(plan.attempt, info.step, info.tokens, time.time()))
    config_text = safe_files.read_text(run_dir, CONFIG_FILE, SMALL_FILE_MAX_BYTES)
    safe_files.write_atomic(run_dir, CONFIG_FILE, resume_config(config_text, plan.checkpoint, output).encode("utf-8"))
    relative = plan.checkpoint.relative_to(run_dir.resolve()) if plan.checkpoint.is_relative_to(run_dir.resolve()) else plan.checkpoint
    note = f"attempt {plan.attempt} resumes from {relative} (step {plan.checkpoint_step}"
    note += f" of {plan.total_steps})" if plan.total_steps else ")"
    if recovered:
        note += f"; steps {recovered[0]}–{recovered[-1]} recovered into the log from the checkpoint"
    with safe_files.opened(run_dir, LOG_FILE, "ab") as log:
        log.write(f"\n===== RocBoard: {note} =====\n".encode())
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
