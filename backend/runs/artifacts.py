"""Run artifacts for download: the adapter archive, and the copy of it the page serves
(adapter_download). Serves nothing outside the run.

The archive holds the adapter, its config, the tokenizer files LLaMA-Factory saved beside
it, and the run's config.yaml: what a user needs to load the adapter elsewhere. Only
regular files directly inside the run's own output directory are taken, each opened
without following links (backend.runs.safe_files): a symlink planted there (pointing anywhere),
an `output/` that is itself a link, or a second name (hard link) of a file elsewhere, is
skipped, never followed. The archive is written under an unpredictable temporary name and
renamed into place, so a link planted at adapter.zip or at any temporary name is replaced,
never written through.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from backend.runs import ADAPTER_ZIP, CONFIG_FILE, OUTPUT_DIR, safe_files

if TYPE_CHECKING:
    from backend.runs import RunState, RunStore

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
# A model directory has a tokenizer when it holds any one of these (backend.config.checks asks that
# of the model the user names); each one saved beside an adapter goes into its archive.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "tiktoken.model")
# What else a tokenizer and the chat template are saved with; archived too, never required.
TOKENIZER_COMPANION_FILES = (
    "special_tokens_map.json",
    "chat_template.jinja",
    "merges.txt",
    "added_tokens.json",
    "generation_config.json",
)


# The folders LLaMA-Factory saves a checkpoint's adapter in (output/checkpoint-<step>); any other
# name a page or a command line sends is refused, so it can never name a path elsewhere.
CHECKPOINT_PATTERN = re.compile(r"^checkpoint-([0-9]{1,9})$")
MAX_CHECKPOINTS = 200  # offered per run (a run saving every step would list thousands)


class NoAdapter(FileNotFoundError):
    pass


def _packable(run_dir: Path, relative: str) -> os.stat_result | None:
    """The file's lstat when it may be packed: a regular file with one name, reached
    without following a link; else None."""
    found = safe_files.lstat_in_run(run_dir, relative)
    if found is None or not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
        return None
    return found


def has_adapter(run_dir: Path) -> bool:
    return all(_packable(run_dir, f"{OUTPUT_DIR}/{name}") is not None for name in ADAPTER_FILES)


def adapter_folder(checkpoint: str) -> str | None:
    """The adapter's folder inside a run: output/ for the final adapter (checkpoint ""), or
    output/checkpoint-N; None for any other name."""
    if not checkpoint:
        return OUTPUT_DIR
    return f"{OUTPUT_DIR}/{checkpoint}" if isinstance(checkpoint, str) and CHECKPOINT_PATTERN.match(checkpoint) else None


def has_adapter_at(run_dir: Path, checkpoint: str = "") -> bool:
    """Whether the final adapter ("") or checkpoint-N's is there to load: both its files
    regular files, reached without following a link (what chat, evaluate and export need;
    the archive asks more of them, see has_adapter)."""
    folder = adapter_folder(checkpoint)
    return folder is not None and all(safe_files.is_regular_file(run_dir, f"{folder}/{name}") for name in ADAPTER_FILES)


def adapter_checkpoints(run_dir: Path) -> list[str]:
    """The run's checkpoint-N folders that hold an adapter, highest step first."""
    try:
        entries = safe_files.list_dir(run_dir, OUTPUT_DIR)
    except (OSError, ValueError):
        return []
    steps = []
    for name, info in entries:
        match = CHECKPOINT_PATTERN.match(name)
        if match and stat.S_ISDIR(info.st_mode) and has_adapter_at(run_dir, name):
            steps.append((int(match.group(1)), name))
    return [name for _, name in sorted(steps, reverse=True)[:MAX_CHECKPOINTS]]


def runs_with_adapters(store: RunStore, limit: int = 500) -> list[RunState]:
    """Training runs that are not running and hold an adapter (the final one or a
    checkpoint's), newest first: what the Chat, Evaluate and Export tabs offer."""
    from backend.runs import RunNotFound

    found = []
    for state in store.list()[:limit]:
        if state.active or state.kind != "train":
            continue
        try:
            run_dir = store.run_dir(state.id)
        except RunNotFound:
            continue
        if has_adapter_at(run_dir) or adapter_checkpoints(run_dir):
            found.append(state)
    return found


def adapter_members(run_dir: Path) -> list[tuple[str, str]]:
    """(path inside the run, name in the archive) for every file the archive carries."""
    if not has_adapter(run_dir):
        raise NoAdapter(f"run {run_dir.name} has no trained adapter yet (no {ADAPTER_FILES[0]} in {OUTPUT_DIR}/)")
    members = [(f"{OUTPUT_DIR}/{name}", name) for name in ADAPTER_FILES + TOKENIZER_FILES + TOKENIZER_COMPANION_FILES]
    members.append((CONFIG_FILE, CONFIG_FILE))
    return [(relative, name) for relative, name in members if _packable(run_dir, relative) is not None]


def _current_archive(run_dir: Path, members: list[tuple[str, str]]) -> bool:
    """Whether adapter.zip is one this app built from these members and is not older than
    any of them (a planted file of another shape, or a second name of one, is rebuilt)."""
    found = _packable(run_dir, ADAPTER_ZIP)
    newest = 0.0
    for relative, _ in members:
        member = _packable(run_dir, relative)
        if member is None:  # gone since the members were listed: built again from what is there
            return False
        newest = max(newest, member.st_mtime)
    if found is None or found.st_mtime < newest:
        return False
    try:
        with safe_files.opened(run_dir, ADAPTER_ZIP) as handle, zipfile.ZipFile(handle) as archive:
            return sorted(archive.namelist()) == sorted(name for _, name in members)
    except (OSError, zipfile.BadZipFile):
        return False


def _zip_info(name: str, found: os.stat_result) -> zipfile.ZipInfo:
    """What ZipInfo.from_file records, from the stat of a file already open."""
    info = zipfile.ZipInfo(name, date_time=time.localtime(max(found.st_mtime, 315532800))[:6])  # zip dates start in 1980
    info.external_attr = (stat.S_IMODE(found.st_mode) | stat.S_IFREG) << 16
    info.file_size = found.st_size
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def build_adapter_zip(run_dir: Path) -> Path:
    """runs/<id>/adapter.zip, rebuilt when the adapter is newer than the archive."""
    members = adapter_members(run_dir)
    target = run_dir / ADAPTER_ZIP
    if _current_archive(run_dir, members):
        return target
    with safe_files.atomic_writer(run_dir, ADAPTER_ZIP) as out, zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for relative, name in members:
            with safe_files.opened(run_dir, relative) as source:
                info = _zip_info(name, os.fstat(source.fileno()))
                with archive.open(info, "w") as member:
                    shutil.copyfileobj(source, member, 1024 * 1024)
    return target


def adapter_download(run_dir: Path, export_dir: Path, run_id: str) -> Path:
    """A servable copy of the run's adapter.zip, in `export_dir` (the app's temp export dir).

    The archive itself is built when the run ends (backend/service/decisions.py); here it
    is only rebuilt when the adapter is newer (a run that ended before this app started).
    A copy, not a hard link: a rename between two names of one file does nothing, so a
    linked temp name would stay behind and break the next view. The copy is made under
    an unpredictable temp name and renamed over the last one; when the last copy is
    already of this archive (same size and mtime), it is served again as it is."""
    build_adapter_zip(run_dir)
    target_dir = export_dir / run_id
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"{run_id}-adapter.zip"
    with safe_files.opened(run_dir, ADAPTER_ZIP) as source:
        found = os.fstat(source.fileno())
        try:
            copied = os.lstat(target)
            if stat.S_ISREG(copied.st_mode) and (copied.st_size, copied.st_mtime_ns) == (found.st_size, found.st_mtime_ns):
                return target
        except OSError:
            pass
        with safe_files.atomic_writer(target_dir, target.name) as out:
            shutil.copyfileobj(source, out, 1024 * 1024)
            out.flush()
            # The archive's mtime on the copy (set before the rename) tells the next view
            # that this copy is of the same archive.
            os.utime(out.fileno(), ns=(found.st_atime_ns, found.st_mtime_ns))
    return target
