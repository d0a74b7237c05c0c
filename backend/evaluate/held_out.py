"""Which data is held out from a run: never a dataset it trained on.

A run trained on the datasets its form names (`dataset`, comma-separated) in its `dataset_dir`,
each a file (or folder) that the folder's dataset_info.json names (`file_name`, joined to the
folder as LLaMA-Factory joins it). A dataset offered for evaluation is that same data when it is
one of those names in that folder, when its file is one of those files (by any path or link),
or when its file holds the same bytes (a copy registered on the Data tab under another name).
Rows copied into a file of another content are not found: the file is the unit compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.config import RunConfig

DATASET_INFO = "dataset_info.json"
INFO_MAX_BYTES = 4 * 1024 * 1024  # a dataset_info.json of thousands of entries
# Files up to this size are hashed whole; larger ones by their size and first and last bytes
# (two different datasets of one exact size and the same 16 MiB at both ends are not a worry).
FULL_HASH_MAX_BYTES = 64 * 1024 * 1024
EDGE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class TrainedOn:
    """What a run trained on: its dataset folder (resolved), the names it read there, and the
    files (resolved) those names are."""

    folder: str
    names: tuple[str, ...]
    files: tuple[str, ...]


def dataset_info(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """A folder's dataset_info.json as a mapping; {} when missing, unreadable or too large."""
    try:
        with open(os.path.join(folder, DATASET_INFO), "rb") as handle:
            data = handle.read(INFO_MAX_BYTES + 1)
    except OSError:
        return {}
    if len(data) > INFO_MAX_BYTES:
        return {}
    try:
        info = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return info if isinstance(info, dict) else {}


def dataset_file(folder: str | os.PathLike[str], name: str, info: Mapping[str, Any] | None = None) -> str | None:
    """The resolved file (or folder) of dataset `name` in `folder`; None for a hub dataset or an
    entry without a file."""
    entry = (dataset_info(folder) if info is None else info).get(name)
    file_name = entry.get("file_name") if isinstance(entry, dict) else None
    if not isinstance(file_name, str) or not file_name or "\0" in file_name:
        return None
    return os.path.realpath(os.path.join(folder, file_name))


def trained_on(config: RunConfig, run_dir: Path) -> TrainedOn:
    """What the run whose typed config is `config` (its saved form read back:
    backend/config/run_form.py) trained on. A relative dataset_dir is the trainer's: it runs
    in the run's folder."""
    folder = config.data.dataset_dir
    names = config.data.datasets
    if not folder:
        return TrainedOn("", names, ())
    resolved = os.path.realpath(os.path.join(run_dir, os.path.expanduser(folder)))
    info = dataset_info(resolved)
    files = tuple(dict.fromkeys(path for path in (dataset_file(resolved, name, info) for name in names) if path))
    return TrainedOn(resolved, names, files)


class SameData:
    """Answers "is this dataset one the run trained on?"; remembers the digests it computed
    (by path, size and modification time) so a tab's visits hash a file once."""

    def __init__(self) -> None:
        self._digests: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()

    def same(self, trained: TrainedOn, folder: str | os.PathLike[str], name: str) -> bool:
        resolved = os.path.realpath(folder)
        if trained.folder and resolved == trained.folder and name in trained.names:
            return True
        path = dataset_file(resolved, name)
        if path is None:
            return False
        if path in trained.files:
            return True
        candidate = self._fingerprint(path)
        return candidate is not None and any(self._fingerprint(other) == candidate for other in trained.files if _size(other) == candidate[0])

    def _fingerprint(self, path: str) -> tuple[int, str] | None:
        """(size, digest) of a regular file; None for a folder, a missing or unreadable file."""
        try:
            info = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        key = (path, info.st_size, info.st_mtime_ns)
        with self._lock:
            known = self._digests.get(key)
        if known is not None:
            return info.st_size, known
        try:
            digest = _digest(path, info.st_size)
        except OSError:
            return None
        with self._lock:
            self._digests[key] = digest
        return info.st_size, digest


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def _digest(path: str, size: int) -> str:
    hashed = hashlib.sha256()
    with open(path, "rb") as handle:
        if size <= FULL_HASH_MAX_BYTES:
            for block in iter(lambda: handle.read(1024 * 1024), b""):
                hashed.update(block)
        else:
            hashed.update(handle.read(EDGE_BYTES))
            handle.seek(size - EDGE_BYTES)
            hashed.update(handle.read(EDGE_BYTES))
    return hashed.hexdigest()
