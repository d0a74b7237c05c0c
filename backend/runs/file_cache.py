"""What was read from a run's files, kept until they change: a value computed from files is
kept while their size and mtime stay the same (a finished run is read once). Files are looked
at inside their run without following links (backend.runs.safe_files)."""

from __future__ import annotations

import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from backend.runs import safe_files

cache_lock = threading.Lock()  # held while a cache dict is read or changed, never while reading a file
T = TypeVar("T")


def in_run(path: Path, run_dir: Path | None) -> tuple[Path, Path]:
    """(run directory, path inside it) of a run file; a bare path's own directory is its root."""
    if run_dir is None:
        return path.parent, Path(path.name)
    return run_dir, path.relative_to(run_dir)


def file_key(path: Path, run_dir: Path | None = None) -> tuple[int, int] | None:
    """(size, mtime) of a regular file reached without following links, else None."""
    found = safe_files.lstat_in_run(*in_run(path, run_dir))
    if found is None or not stat.S_ISREG(found.st_mode):
        return None
    return found.st_size, found.st_mtime_ns


def memo(cache: dict, name: Any, key: Any, compute: Callable[[], T]) -> T:
    """`compute()`, kept in `cache` under `name` while `key` (the files' size and mtime) stays
    the same. An exception from `compute` is not kept: the next call tries again."""
    with cache_lock:
        cached = cache.get(name)
    if cached is not None and cached[0] == key:
        return cached[1]
    value = compute()
    with cache_lock:
        cache[name] = (key, value)
    return value


def prune(caches: tuple[dict, ...], root: Path, live_dirs: set[Path]) -> None:
    """Forgets the cached reads of `root`'s runs that are no longer on disk."""
    with cache_lock:
        for cache in caches:
            gone = [p for p in cache if root in p.parents and p not in live_dirs and not any(parent in live_dirs for parent in p.parents)]
            for path in gone:
                del cache[path]


__all__ = ["cache_lock", "file_key", "in_run", "memo", "prune"]
