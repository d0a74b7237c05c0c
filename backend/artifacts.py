"""Run artifacts for download: the adapter archive. Serves nothing outside the run.

The archive holds the adapter, its config, the tokenizer files LLaMA-Factory saved beside
it, and the run's config.yaml: what a user needs to load the adapter elsewhere. Only
regular files directly inside the run's own output directory are taken; a symlink planted
there (pointing anywhere) is skipped, never followed.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

from backend.runs import ADAPTER_ZIP, CONFIG_FILE, OUTPUT_DIR

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "generation_config.json",
)


class NoAdapter(FileNotFoundError):
    pass


def _regular_file(path: Path) -> bool:
    """A regular file, not a symlink (lstat: the link itself, not what it points at)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def has_adapter(run_dir: Path) -> bool:
    output = run_dir / OUTPUT_DIR
    return all(_regular_file(output / name) for name in ADAPTER_FILES)


def adapter_members(run_dir: Path) -> list[tuple[Path, str]]:
    """(file on disk, name in the archive) for every file the archive carries."""
    output = run_dir / OUTPUT_DIR
    if not has_adapter(run_dir):
        raise NoAdapter(f"run {run_dir.name} has no trained adapter yet (no {ADAPTER_FILES[0]} in {OUTPUT_DIR}/)")
    members = [(output / name, name) for name in ADAPTER_FILES]
    members += [(output / name, name) for name in TOKENIZER_FILES if _regular_file(output / name)]
    if _regular_file(run_dir / CONFIG_FILE):
        members.append((run_dir / CONFIG_FILE, CONFIG_FILE))
    return members


def build_adapter_zip(run_dir: Path) -> Path:
    """runs/<id>/adapter.zip, rebuilt when the adapter is newer than the archive."""
    members = adapter_members(run_dir)
    target = run_dir / ADAPTER_ZIP
    newest = max(os.lstat(path).st_mtime for path, _ in members)
    if _regular_file(target) and os.lstat(target).st_mtime >= newest:
        return target
    partial = target.with_name(f".{ADAPTER_ZIP}.partial")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, name in members:
            archive.write(path, arcname=name)
    os.replace(partial, target)
    return target
