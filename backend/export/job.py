"""The export job: `llamafactory-cli export` (and the GGUF conversion) run as children into a
hidden staging folder beside the target, moved into place only when complete; its progress,
its result, and the cleanup of what a failure, a cancel or a killed app left.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from backend.export import gguf_convert as gguf_tools
from backend.export.merge import ExportPlan
from backend.export.size import GIB
from backend.export.target import MANIFEST_NAME, foreign_entries, replace_finding, write_manifest
from backend.findings import Finding
from backend.i18n import Message
from backend.runs import safe_files
from backend.runs.launcher import OFFLINE_ENV, llamafactory_cli
from backend.security.child_env import child_env

STAGING_PREFIX = "."
STAGING_MARK = ".rocboard-export-"
MODEL_SUBDIR = "model"  # inside the staging folder: becomes the target
OLD_SUBDIR = "old"  # inside the staging folder: the replaced folder, until it is removed
CONFIG_NAME = "export.yaml"
LOG_NAME = "export.log"
GGUF_LOG_NAME = "gguf.log"
# A zip of the merged folder is offered up to this size; larger: the path only.
DOWNLOAD_MAX_BYTES = 2 * GIB
LOG_TAIL_BYTES = 64 * 1024
STOP_WAIT_S = 15.0
POLL_S = 0.5
MERGE_TIMEOUT_S = 24 * 3600  # a very large model on a slow disk; cancel ends it sooner
GGUF_TIMEOUT_S = 24 * 3600
DISK_FULL_PATTERN = re.compile(r"No space left on device|ENOSPC|\[Errno 28\]")
MEMORY_PATTERN = re.compile(r"CUDA out of memory|HIP out of memory|OutOfMemoryError|Cannot allocate memory|MemoryError")
TOKENIZER_SAVE_FAILED = "Cannot save tokenizer"
WARNING_DEFAULT_PRE = "default-pre-tokenizer"


@dataclass(frozen=True)
class ExportResult:
    target: Path
    files: tuple[tuple[str, int], ...]  # (name, bytes), sorted
    total_bytes: int
    seconds: float
    gguf: dict[str, Any] | None = None  # what gguf.GGUFReader read back from the file
    warnings: tuple[str, ...] = ()  # ids: WARNING_DEFAULT_PRE
    download: Path | None = None  # a zip of the folder (small models), None: the path only


@dataclass
class ExportProgress:
    phase: str = "idle"  # config | loading | merging | saving | gguf | finishing | done | failed | cancelled
    started: float = 0.0
    ended: float | None = None
    written_bytes: int = 0
    expected_bytes: int = 0
    run_id: str = ""
    target: str = ""
    findings: list[Finding] = field(default_factory=list)
    result: ExportResult | None = None
    log_tail: str = ""

    @property
    def running(self) -> bool:
        return self.phase not in ("idle", "done", "failed", "cancelled")

    def elapsed(self, now: float | None = None) -> float:
        if not self.started:
            return 0.0
        return max(0.0, (self.ended or (now if now is not None else time.time())) - self.started)


def make_parents(folder: Path) -> list[Path]:
    """Makes the missing folders down to `folder` (the default export root on the first
    export), each 0700 and never through a link; returns those it made."""
    missing = []
    here = folder
    while not os.path.lexists(here) and here != here.parent:
        missing.append(here)
        here = here.parent
    made = []
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # whatever the umask: only its owner reads exported models
            made.append(path)
        except FileExistsError:
            pass
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise _Failed(Finding.of("export_dir", "export-dir-link", path=repr(str(path)), target=os.path.realpath(path)))
    return made


# --- the LLaMA-Factory config ---------------------------------------------------------------------


def export_config(plan: ExportPlan, export_dir: Path) -> dict[str, Any]:
    """The YAML `llamafactory-cli export` reads. infer_dtype is the base's dtype: LLaMA-Factory's
    `auto` turns a float32 model into bf16/fp16 on a GPU machine, and the merged model is meant
    to answer as base + adapter does."""
    return {
        "model_name_or_path": str(plan.base_dir),
        "adapter_name_or_path": str(plan.adapter_dir),
        "template": plan.template,
        "finetuning_type": "lora",
        "export_dir": str(export_dir),
        "export_size": int(plan.request.shard_gb),
        "export_device": plan.request.device,
        "export_legacy_format": False,
        "infer_dtype": plan.size.dtype,
    }


def export_command(config_path: Path) -> list[str]:
    return [llamafactory_cli(), "export", str(config_path)]


def export_env() -> dict[str, str]:
    import sys

    here = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    own = dict(OFFLINE_ENV)
    own["PATH"] = os.pathsep.join([here, path]) if path else here
    # No GPU is wanted by a CPU merge; none is hidden either: `auto` may use it.
    return child_env(None, (), own)


# --- reading what a child wrote -------------------------------------------------------------------


def read_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def folder_bytes(folder: Path) -> int:
    total = 0
    try:
        for entry in os.scandir(folder):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total


def merge_phase(log_text: str, staged_bytes: int) -> str:
    """Where a running `llamafactory-cli export` is, from its log and the staging folder."""
    if staged_bytes > 0:
        return "saving"
    if "Merged " in log_text or "Convert model dtype" in log_text:
        return "merging"
    return "loading"


def step_words(step: str) -> Message:
    """The step an export failed in (merge, gguf, files, export), as a message id: a translated
    sentence never carries the English word."""
    return Message(f"export.step.{step}")


def failure_finding(log_text: str, step: str) -> Finding:
    """Why a child failed, from its log: a full disk, memory, or its last line."""
    if DISK_FULL_PATTERN.search(log_text):
        return Finding.of("export_dir", "export-disk-full", step=step_words(step))
    if MEMORY_PATTERN.search(log_text):
        return Finding.of("export_device", "export-out-of-memory", step=step_words(step))
    lines = [line.strip() for line in log_text.splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if "Error" in line or "error" in line), lines[-1] if lines else "")
    return Finding.of("export", "export-failed", step=step_words(step), error=last[-300:])


# --- the job --------------------------------------------------------------------------------------


class Cancelled(Exception):
    pass


class _Failed(Exception):
    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.problem)
        self.finding = finding


def staging_name(target: Path) -> str:
    """Hidden, beside the target, naming the process that writes it (see remove_stale_staging)."""
    return f"{STAGING_PREFIX}{target.name}{STAGING_MARK}{os.getpid()}-{secrets.token_hex(4)}"


def remove_stale_staging(parent: Path, target_name: str) -> list[Path]:
    """Staging folders of `target_name` left by a process that is gone (an app killed with
    SIGKILL cannot clean up): removed before the next export to that folder."""
    import psutil

    removed = []
    for path in leftover_staging(parent, target_name):
        pid_text = path.name.rsplit(STAGING_MARK, 1)[-1].split("-", 1)[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not psutil.pid_exists(int(pid_text)) and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class ExportJob:
    """One export, in a thread of its own: `start()`, read `progress`, `cancel()`, `join()`."""

    def __init__(self, plan: ExportPlan, download_dir: Path | None = None, on_line: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        self.download_dir = download_dir
        self.on_line = on_line
        # The size the plan line showed ("Size needed"): the progress counts toward it.
        self.progress = ExportProgress(
            phase="config", started=time.time(), expected_bytes=plan.needed_disk, run_id=plan.request.run_id, target=str(plan.target)
        )
        self.staging = plan.target.parent / staging_name(plan.target)
        # The children's logs live off the target's disk: a full disk must not silence them.
        self.log_dir: Path | None = None
        self._cancel = threading.Event()
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"export-{plan.request.run_id}", daemon=True)

    # --- control --------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        self._cancel.set()
        self._stop_child()

    def join(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def child_pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def _stop_child(self) -> None:
        with self._lock:
            process = self._process
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, STOP_WAIT_S)):
            try:
                os.killpg(process.pid, sig)
            except (ProcessLookupError, PermissionError):
                return
            try:
                process.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def _set(self, phase: str) -> None:
        if self.progress.phase != phase:
            self.progress.phase = phase
            if self.on_line:
                self.on_line(phase)

    # --- the work -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            result = self._work()
        except Cancelled:
            self._cleanup()
            self.progress.phase = "cancelled"
        except _Failed as failed:
            self._cleanup()
            self.progress.findings = [failed.finding]
            self.progress.phase = "failed"
        except OSError as error:
            self._cleanup()
            key = "export-disk-full" if error.errno == 28 else "export-failed"
            self.progress.findings = [Finding.of("export_dir", key, step=step_words("files"), error=str(error)[:300])]
            self.progress.phase = "failed"
        except Exception as error:  # noqa: BLE001 - any failure ends the job with a finding, not a traceback
            self._cleanup()
            self.progress.findings = [Finding.of("export", "export-failed", step=step_words("export"), error=f"{type(error).__name__}: {error}"[:300])]
            self.progress.phase = "failed"
        else:
            self.progress.result = result
            self.progress.phase = "done"
        finally:
            if self.log_dir is not None:
                shutil.rmtree(self.log_dir, ignore_errors=True)
            self.progress.ended = time.time()

    def _cleanup(self) -> None:
        self._stop_child()
        shutil.rmtree(self.staging, ignore_errors=True)

    def _check_cancel(self) -> None:
        if self._cancel.is_set():
            raise Cancelled()

    def _child(self, command: list[str], log_path: Path, timeout_s: float, step: str, watch: Callable[[str], None]) -> str:
        """Runs one child to its end, logging to `log_path`; returns its log."""
        self._check_cancel()
        with open(log_path, "wb") as log:
            with self._lock:
                self._process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=str(self.staging), env=export_env(), start_new_session=True
                )
            process = self._process
            deadline = time.monotonic() + timeout_s
            while process.poll() is None:
                if self._cancel.is_set():
                    self._stop_child()
                    raise Cancelled()
                if time.monotonic() > deadline:
                    self._stop_child()
                    raise _Failed(Finding.of("export", "export-failed", step=step_words(step), error=Message("export.no-end", seconds=int(timeout_s))))
                text = read_tail(log_path)
                self.progress.log_tail = text[-4000:]
                watch(text)
                time.sleep(POLL_S)
        text = read_tail(log_path)
        self.progress.log_tail = text[-4000:]
        self._check_cancel()
        if process.returncode != 0:
            raise _Failed(failure_finding(text, step))
        return text

    def _work(self) -> ExportResult:
        plan = self.plan
        started = time.time()
        self.log_dir = Path(tempfile.mkdtemp(prefix="rocboard-export-logs-"))
        make_parents(plan.target.parent)
        remove_stale_staging(plan.target.parent, plan.target.name)
        os.mkdir(self.staging, 0o755)
        model_dir = self.staging / MODEL_SUBDIR
        config_path = self.staging / CONFIG_NAME
        config_path.write_text(yaml.safe_dump(export_config(plan, model_dir), sort_keys=False), encoding="utf-8")
        self._set("loading")

        def watch_merge(text: str) -> None:
            staged = folder_bytes(model_dir)
            self.progress.written_bytes = staged
            self._set(merge_phase(text, staged))

        log = self._child(export_command(config_path), self.log_dir / LOG_NAME, MERGE_TIMEOUT_S, "merge", watch_merge)
        self.progress.written_bytes = folder_bytes(model_dir)
        self._check_written(model_dir, log)

        warnings: list[str] = []
        gguf_summary = None
        if plan.request.gguf != "none":
            self._set("gguf")
            converter = gguf_tools.find_converter()
            if converter is None:
                raise _Failed(Finding.of("gguf", "export-gguf-missing"))
            out = model_dir / gguf_tools.gguf_file_name(plan.target.name, plan.request.gguf)
            gguf_log = self._child(
                gguf_tools.runner_command(converter, model_dir, out, plan.request.gguf),
                self.log_dir / GGUF_LOG_NAME,
                GGUF_TIMEOUT_S,
                "gguf",
                lambda text: setattr(self.progress, "written_bytes", folder_bytes(model_dir)),
            )
            gguf_summary, warnings = gguf_tools.parse_runner_output(gguf_log)
            if gguf_summary is None or not out.is_file():
                raise _Failed(failure_finding(gguf_log, "gguf"))

        self._set("finishing")
        self._check_cancel()
        write_manifest(model_dir, plan.request.run_id)
        self._move_into_place(model_dir)
        files = tuple(
            sorted(
                (entry.name, entry.stat(follow_symlinks=False).st_size)
                for entry in os.scandir(plan.target)
                if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME
            )
        )
        total = sum(size for _, size in files)
        result = ExportResult(plan.target, files, total, time.time() - started, gguf_summary, tuple(warnings))
        if self.download_dir is not None and total <= DOWNLOAD_MAX_BYTES:
            result = replace(result, download=zip_folder(plan.target, self.download_dir / plan.request.run_id, f"{plan.target.name}.zip"))
        return result

    def _check_written(self, model_dir: Path, log: str) -> None:
        """LLaMA-Factory logs a failed tokenizer save as a warning and goes on: the folder is
        checked for what a usable merged model needs."""
        names = set(os.listdir(model_dir)) if model_dir.is_dir() else set()
        if TOKENIZER_SAVE_FAILED in log and DISK_FULL_PATTERN.search(log):
            raise _Failed(Finding.of("export_dir", "export-disk-full", step=step_words("merge")))
        missing = [name for name in ("config.json", "Modelfile", "tokenizer_config.json") if name not in names]
        if not any(name.endswith(".safetensors") for name in names):
            missing.append("*.safetensors")
        if missing:
            raise _Failed(Finding.of("export", "export-incomplete", missing=", ".join(missing)))

    def _move_into_place(self, model_dir: Path) -> None:
        """The finished folder takes the target's name; an old one is moved aside first and
        removed only once the new one is in place."""
        target = self.plan.target
        old = self.staging / OLD_SUBDIR
        if os.path.lexists(target):
            if os.path.islink(target) or not os.path.isdir(target):
                raise _Failed(Finding.of("export_dir", "export-dir-link", path=repr(str(target)), target=os.path.realpath(target)))
            # Looked at again: the folder may have changed since the plan.
            if any(True for _ in os.scandir(target)):
                refusal = replace_finding(str(target), target, foreign_entries(target), self.plan.request.overwrite, self.plan.request.confirm)
                if refusal is not None:
                    raise _Failed(refusal)
            os.rename(target, old)
        try:
            os.rename(model_dir, target)
        except OSError:
            if os.path.isdir(old) and not os.path.lexists(target):
                os.rename(old, target)  # the old folder back where it was
            raise
        shutil.rmtree(self.staging, ignore_errors=True)


def zip_folder(folder: Path, out_dir: Path, name: str) -> Path:
    """A zip of the folder's files (stored: weights do not compress), written under a temp
    name and renamed into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with safe_files.atomic_writer(out_dir, name) as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME:
                archive.write(entry.path, f"{folder.name}/{entry.name}")
    return out_dir / name


def leftover_staging(parent: Path, target_name: str) -> list[Path]:
    """Staging folders of `target_name` in `parent` (a test's and a cleanup's question)."""
    prefix = f"{STAGING_PREFIX}{target_name}{STAGING_MARK}"
    try:
        return [Path(entry.path) for entry in os.scandir(parent) if entry.name.startswith(prefix)]
    except OSError:
        return []
