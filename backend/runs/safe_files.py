"""Files inside a run directory, opened without following a single symlink.

A run directory can be written by others (a shared runs dir, a run copied in from elsewhere,
a trainer that was told to write somewhere odd). A symlink or a FIFO planted there must not
make the app read, write, pack or delete anything outside the run, nor hang it. So every
path inside a run is opened here, component by component from a descriptor of the run
directory (`openat` with O_NOFOLLOW, O_DIRECTORY for directories); a component that is a
symlink, or a file that is not a regular file, is refused with UnsafePath. Only the run
directory's parents (the runs dir the user configured) are trusted as they are.

Writes go to an unpredictable temporary name created with O_EXCL in the same directory, then
`renameat` over the target: a planted link at the target is replaced, never written through.
Reads are bounded: whoever reads says how many bytes at most.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import BinaryIO

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """A path in a run that is a symlink, not a regular file, or leaves the run."""


def _parts(relative: str | os.PathLike[str]) -> list[str]:
    text = os.fspath(relative)
    if text and "/" not in text and "\0" not in text and text not in (".", ".."):
        return [text]  # one name, the common case (run files are read every second or so)
    parts = [part for part in PurePosixPath(text).parts if part not in ("", ".")]
    if text.startswith("/") or any(part == ".." or "/" in part or "\0" in part for part in parts):
        raise UnsafePath(errno.EPERM, "not a path inside the run", text)
    return parts


def open_run_dir(run_dir: Path) -> int:
    """A descriptor of the run directory itself; refused when its last component is a link."""
    parent_path, name = os.path.split(os.fspath(run_dir).rstrip("/"))  # no pathlib: opened every poll
    parent = os.open(parent_path or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _open_dir_at(parent, name, run_dir)
    finally:
        os.close(parent)


def _open_dir_at(dir_fd: int, name: str, shown: object) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(error.errno, "a symlink or not a directory, not followed", str(shown)) from None
        raise


def open_dir_in_run(run_dir: Path, relative: str | os.PathLike[str] = "") -> int:
    """A descriptor of a directory inside the run, reached without following any link."""
    fd = open_run_dir(run_dir)
    if not relative:
        return fd
    try:
        for part in _parts(relative):
            child = _open_dir_at(fd, part, Path(run_dir) / relative)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_in_run(run_dir: Path, relative: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of the file `relative` inside `run_dir`, opened with `flags`.

    Every directory on the way is opened with O_NOFOLLOW|O_DIRECTORY from the previous one's
    descriptor, the file itself with O_NOFOLLOW; an existing file must be a regular file (a
    FIFO is opened non-blocking to find out, so it cannot hang the app)."""
    parts = _parts(relative)
    if not parts:
        raise UnsafePath(errno.EISDIR, "no file named", os.fspath(relative))
    dir_fd = open_dir_in_run(run_dir, PurePosixPath(*parts[:-1]) if len(parts) > 1 else "")
    try:
        try:
            fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dir_fd)
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise UnsafePath(error.errno, "a symlink, not followed", str(Path(run_dir) / relative)) from None
            raise
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePath(errno.EINVAL, "not a regular file", str(Path(run_dir) / relative))
        if not flags & os.O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def opened(run_dir: Path, relative: str | os.PathLike[str], mode: str = "rb") -> Iterator:
    """open_in_run as a binary file object: "rb", "ab" (created when missing) or "r+b"."""
    flags = {"rb": os.O_RDONLY, "ab": os.O_WRONLY | os.O_APPEND | os.O_CREAT, "r+b": os.O_RDWR}[mode]
    handle = os.fdopen(open_in_run(run_dir, relative, flags), mode)
    try:
        yield handle
    finally:
        handle.close()


def lstat_in_run(run_dir: Path, relative: str | os.PathLike[str]) -> os.stat_result | None:
    """The entry itself (not what a link points at), reached without following links; None
    when it, or a directory on the way, is missing or is a link."""
    parts = _parts(relative)
    try:
        if not parts:
            fd = open_run_dir(run_dir)
            try:
                return os.fstat(fd)
            finally:
                os.close(fd)
        dir_fd = open_dir_in_run(run_dir, PurePosixPath(*parts[:-1]) if len(parts) > 1 else "")
    except OSError:
        return None
    try:
        return os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return None
    finally:
        os.close(dir_fd)


# A file's mtime moves by at least this on a rewrite made this long after it was last
# written, whatever the filesystem's timestamp granularity (coarse clocks tick every few ms;
# FAT, some network filesystems keep 1-2 s).
SETTLED_NS = 2_000_000_000


def settled_key(found: os.stat_result | None) -> tuple[int, int, int, int] | None:
    """(device, inode, size, mtime) of a regular file last written at least SETTLED_NS ago,
    else None: two equal keys mean the file was not written in between, since a write after
    the first key moves the mtime (a rewrite in the same clock tick as the write before it,
    with the same size, would not; a file written that recently has no key)."""
    if found is None or not stat.S_ISREG(found.st_mode) or found.st_mtime_ns > time.time_ns() - SETTLED_NS:
        return None
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns


def lstat_many(run_dir: Path, relatives: list[str]) -> list[os.stat_result | None]:
    """lstat_in_run of each of `relatives`, in one walk: the run directory (and each folder on
    the way) opened once for all of them, none through a link. Asked every look at a live run,
    so a look at files that have not changed costs a few stats."""
    try:
        root = open_run_dir(run_dir)
    except OSError:
        return [None] * len(relatives)
    folders: dict[tuple[str, ...], int | None] = {(): root}
    try:
        found: list[os.stat_result | None] = []
        for relative in relatives:
            parts = _parts(relative)
            if not parts:
                found.append(os.fstat(root))
                continue
            folder = tuple(parts[:-1])
            if folder not in folders:
                folders[folder] = _walk_folders(root, folder)
            fd = folders[folder]
            try:
                found.append(None if fd is None else os.stat(parts[-1], dir_fd=fd, follow_symlinks=False))
            except OSError:
                found.append(None)
        return found
    finally:
        for fd in folders.values():
            if fd is not None:
                os.close(fd)


def _walk_folders(root: int, folder: tuple[str, ...]) -> int | None:
    """A new descriptor of `folder` under the directory `root`, no link followed; None when missing or refused."""
    fd = root
    try:
        for part in folder:
            child = _open_dir_at(fd, part, part)
            if fd != root:
                os.close(fd)
            fd = child
    except OSError:
        if fd != root:
            os.close(fd)
        return None
    return fd


def is_regular_file(run_dir: Path, relative: str | os.PathLike[str]) -> bool:
    found = lstat_in_run(run_dir, relative)
    return found is not None and stat.S_ISREG(found.st_mode)


def is_directory(run_dir: Path, relative: str | os.PathLike[str]) -> bool:
    found = lstat_in_run(run_dir, relative)
    return found is not None and stat.S_ISDIR(found.st_mode)


def list_dir(run_dir: Path, relative: str | os.PathLike[str] = "") -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of each entry of a directory inside the run; [] when it cannot be read."""
    try:
        fd = open_dir_in_run(run_dir, relative)
    except OSError:
        return []
    try:
        entries = []
        for name in os.listdir(fd):
            try:
                entries.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False)))
            except OSError:
                continue
        return entries
    finally:
        os.close(fd)


def read_bytes(run_dir: Path, relative: str | os.PathLike[str], limit: int) -> bytes:
    """The whole file, which must hold at most `limit` bytes (UnsafePath when larger)."""
    fd = open_in_run(run_dir, relative)
    try:  # os-level reads: no file object for a small whole-file read
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise UnsafePath(errno.EFBIG, f"larger than {limit} bytes", str(Path(run_dir) / relative))
    return data


def read_text(run_dir: Path, relative: str | os.PathLike[str], limit: int) -> str:
    return read_bytes(run_dir, relative, limit).decode("utf-8")


def read_tail(run_dir: Path, relative: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The last `max_bytes` bytes of a file."""
    with opened(run_dir, relative) as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - max_bytes))
        return handle.read(max_bytes)


def temp_name(name: str) -> str:
    """A hidden name beside `name` nobody can guess (so nobody can plant a link there first)."""
    return f".{name}.{secrets.token_hex(8)}.tmp"


@contextmanager
def atomic_writer(run_dir: Path, relative: str | os.PathLike[str], mode: int = 0o644) -> Iterator[BinaryIO]:
    """A binary file that replaces `relative` when the `with` block ends without an error.

    It is written under an unpredictable name (O_EXCL) in the same directory, then renamed
    over the target: a link at the target is replaced, not followed, and a reader sees the
    old file or the new one, never half of one. On an error the partial file is removed and
    the target is left as it was."""
    parts = _parts(relative)
    if not parts:
        raise UnsafePath(errno.EISDIR, "no file named", os.fspath(relative))
    dir_fd = open_dir_in_run(run_dir, PurePosixPath(*parts[:-1]) if len(parts) > 1 else "")
    try:
        tmp = temp_name(parts[-1])
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as handle:
                yield handle
            os.replace(tmp, parts[-1], src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    finally:
        os.close(dir_fd)


def write_atomic(run_dir: Path, relative: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replaces the file with `data` (see atomic_writer)."""
    with atomic_writer(run_dir, relative, mode) as handle:
        handle.write(data)


def make_dir(run_dir: Path, relative: str | os.PathLike[str]) -> None:
    """mkdir inside the run (parents must exist and be real directories); an existing real
    directory is fine, an existing link is refused."""
    parts = _parts(relative)
    dir_fd = open_dir_in_run(run_dir, PurePosixPath(*parts[:-1]) if len(parts) > 1 else "")
    try:
        try:
            os.mkdir(parts[-1], 0o755, dir_fd=dir_fd)
        except FileExistsError:
            os.close(_open_dir_at(dir_fd, parts[-1], Path(run_dir) / relative))
    finally:
        os.close(dir_fd)


__all__ = [
    "UnsafePath",
    "atomic_writer",
    "is_directory",
    "is_regular_file",
    "list_dir",
    "lstat_in_run",
    "lstat_many",
    "make_dir",
    "open_dir_in_run",
    "open_in_run",
    "open_run_dir",
    "opened",
    "read_bytes",
    "read_tail",
    "read_text",
    "settled_key",
    "temp_name",
    "write_atomic",
]
