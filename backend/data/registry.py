"""RocBoard's own dataset folder: `<runs_dir>/datasets/`, a LLaMA-Factory `dataset_dir`.

It holds its own `dataset_info.json` and `files/` (the copies of uploads). A dataset named by
a server path stays where it is: its entry holds the resolved absolute path (LLaMA-Factory
joins dataset_dir with file_name, and os.path.join keeps an absolute one). RocBoard never
writes in the user's folders.

An add is all or nothing: the name and the file are checked first, an upload is copied under
a temporary name, and only under an exclusive lock is the copy renamed into place and the
entry written (dataset_info.json replaced atomically); on any failure the copy is removed.
Each entry also carries `"rocboard": {...}` (source, original name, rows, size, an upload's
sha256, when added): LLaMA-Factory's DatasetAttr.join reads only the keys it knows, so it
ignores this one.

A file is registered once per way of reading it: a file that already is a dataset with the
same layout and columns (the same server path, or the same bytes under any file name) is
named, not added again (`same_dataset`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from backend.config.paths import path_problem
from backend.data.dataset_file import Inspection
from backend.data.layout import ColumnMapping, dataset_info_entry
from backend.data.reading import inspect_bounded
from backend.findings import Finding
from backend.i18n import Message
from backend.i18n.errors import file_error, os_error
from backend.runs.safe_files import lstat_in_run, make_dir, open_dir_in_run, open_in_run, opened, read_bytes, write_atomic

DATASETS_DIRNAME = "datasets"
FILES_DIRNAME = "files"
DATASET_INFO = "dataset_info.json"
LOCK_NAME = ".lock"
INFO_MAX_BYTES = 16 * 2**20  # dataset_info.json is read no further
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
COPY_BLOCK = 1 << 20


@dataclass(frozen=True)
class AddResult:
    name: str | None  # the registered name; None when refused
    findings: tuple[Finding, ...]
    inspection: Inspection | None
    existing: str | None = None  # refused because the file already is this dataset


class _Refused(Exception):
    def __init__(self, findings: list[Finding]) -> None:
        super().__init__("; ".join(f.problem for f in findings))
        self.findings = findings


class DatasetRegistry:
    def __init__(self, runs_dir: Path, allowed_roots: Sequence[Path], max_upload_bytes: int) -> None:
        self.runs_dir = Path(runs_dir)
        self.folder = self.runs_dir / DATASETS_DIRNAME
        # The roots as the OS resolves them, so a path is compared with what it really is.
        self.allowed_roots = tuple(Path(os.path.realpath(os.path.expanduser(str(root)))) for root in allowed_roots)
        self.max_upload_bytes = int(max_upload_bytes)

    # --- reading -------------------------------------------------------------------------------

    def _read_info(self) -> dict[str, Any]:
        """dataset_info.json as a mapping; {} when missing. Raises _Refused when unreadable."""
        try:
            data = read_bytes(self.folder, DATASET_INFO, INFO_MAX_BYTES)
        except FileNotFoundError:
            return {}
        except OSError as error:
            raise _Refused([Finding.of("dataset_name", "data-registry-broken", file=str(self.folder / DATASET_INFO), error=os_error(error))]) from None
        try:
            info = json.loads(data.decode("utf-8"))
        except ValueError as error:
            raise _Refused([Finding.of("dataset_name", "data-registry-broken", file=str(self.folder / DATASET_INFO), error=file_error(error))]) from None
        except RecursionError:  # nested a thousand levels deep: RocBoard never writes that
            too_deep = Message("data.registry.too_deep", file=DATASET_INFO)
            raise _Refused([Finding.of("dataset_name", "data-registry-broken", file=str(self.folder / DATASET_INFO), error=too_deep)]) from None
        if not isinstance(info, dict):
            raise _Refused([Finding.of("dataset_name", "data-registry-broken", file=str(self.folder / DATASET_INFO), error=Message("file-error.not-json-object"))])
        return info

    def _info_or_empty(self) -> dict[str, Any]:
        try:
            return self._read_info()
        except _Refused:
            return {}

    def names(self) -> list[str]:
        """The registered names, in the order they were added."""
        return list(self._info_or_empty())

    def entry(self, name: str) -> dict | None:
        found = self._info_or_empty().get(name)
        return found if isinstance(found, dict) else None

    def file_of(self, name: str) -> Path | None:
        entry = self.entry(name)
        file_name = entry.get("file_name") if entry else None
        if not isinstance(file_name, str) or not file_name:
            return None
        return Path(os.path.join(self.folder, file_name))  # as LLaMA-Factory joins them

    # --- checks --------------------------------------------------------------------------------

    def check_name(self, name: str) -> list[Finding]:
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            return [Finding.of("dataset_name", "data-name-invalid", name=repr(name)[:80])]
        try:
            taken = set(self._read_info())
        except _Refused as refused:
            return refused.findings
        if name in taken:
            return [Finding.of("dataset_name", "data-name-taken", name=repr(name), suggestion=repr(_free_name(name, taken)))]
        return []

    def check_server_path(self, raw: str) -> tuple[Path | None, list[Finding]]:
        """The file a typed server path names, resolved, when it is a regular file inside an
        allowed root (a link is followed to its target, which must be inside one too)."""
        raw = (raw or "").strip()
        if not raw:
            return None, [Finding.of("data_path", "data-path-empty")]
        problem = path_problem(raw)
        if problem:
            return None, [Finding.of("data_path", "data-path-unusable", path=repr(raw[:120]), problem=problem)]
        expanded = os.path.expanduser(raw)
        if not os.path.isabs(expanded):
            return None, [Finding.of("data_path", "data-path-not-absolute", path=repr(raw))]
        if not self.allowed_roots:
            return None, [Finding.of("data_path", "data-path-no-roots", path=repr(raw))]
        real = Path(os.path.realpath(expanded))
        roots = ", ".join(str(root) for root in self.allowed_roots)
        if not any(real == root or real.is_relative_to(root) for root in self.allowed_roots):
            literal = Path(os.path.normpath(expanded))
            if any(literal.is_relative_to(root) for root in self.allowed_roots):
                return None, [Finding.of("data_path", "data-path-link-outside", path=repr(raw), target=str(real), roots=roots)]
            return None, [Finding.of("data_path", "data-path-outside", path=repr(raw), roots=roots)]
        try:
            info = os.stat(real)
        except FileNotFoundError:
            return None, [Finding.of("data_path", "data-path-not-found", path=repr(raw))]
        except OSError as error:
            return None, [Finding.of("data_path", "data-path-unusable", path=repr(raw), problem=os_error(error))]
        if stat.S_ISDIR(info.st_mode):
            return None, [Finding.of("data_path", "data-path-is-dir", path=repr(raw))]
        if not stat.S_ISREG(info.st_mode):
            return None, [Finding.of("data_path", "data-path-not-file", path=repr(raw))]
        return real, []

    def _upload_findings(self, uploaded: Path, shown: str) -> list[Finding]:
        try:
            info = os.stat(uploaded)
        except OSError as error:
            return [Finding.of("data_file", "data-unreadable", file=shown, error=os_error(error))]
        if not stat.S_ISREG(info.st_mode):
            return [Finding.of("data_file", "data-unreadable", file=shown, error=Message("file-error.not-regular"))]
        if info.st_size > self.max_upload_bytes:
            return [Finding.of("data_file", "data-upload-too-big", file=shown, size=f"{info.st_size / 2**20:.1f}", limit=f"{self.max_upload_bytes / 2**20:.0f}")]
        return []

    def inspect_upload(self, uploaded: Path, original_name: str, mapping: ColumnMapping | None = None) -> Inspection:
        shown = _shown_name(original_name, uploaded)
        refused = self._upload_findings(Path(uploaded), shown)
        if refused:
            return Inspection(Path(uploaded), "", 0, (), (), (), mapping, tuple(refused))
        return inspect_bounded(Path(uploaded), shown, mapping, max_bytes=self.max_upload_bytes)

    def inspect_server_path(self, raw: str, mapping: ColumnMapping | None = None) -> Inspection:
        real, findings = self.check_server_path(raw)
        if real is None:
            return Inspection(Path(raw or ""), "", 0, (), (), (), mapping, tuple(findings))
        return inspect_bounded(real, str(real), mapping)

    # --- the same file again ---------------------------------------------------------------

    def same_dataset(self, candidate: Path, mapping: ColumnMapping | None, server_path: bool = False) -> str | None:
        """The registered dataset `candidate` already is when read with `mapping`: an entry
        with the same layout, columns and tags whose file is the same server path
        (`server_path`: the candidate is used where it is) or holds the same bytes. None when
        there is none. Bytes are compared only between files of the same size, at most the
        upload limit (an upload's sha256 is stored when it is added)."""
        if mapping is None:
            return None
        try:
            info = self._read_info()
            size = os.stat(candidate).st_size
        except (_Refused, OSError):
            return None
        wanted = _how_read(dataset_info_entry(mapping, ""))
        real = os.path.realpath(candidate)
        digest: list[str] = []  # the candidate's sha256, computed once when a size matches

        def candidate_digest() -> str | None:
            if not digest:
                try:
                    with open(candidate, "rb") as handle:
                        digest.append(_sha256(handle))
                except OSError:
                    return None
            return digest[0]

        for name, entry in info.items():
            if not isinstance(entry, dict) or _how_read(entry) != wanted:
                continue
            file_name = entry.get("file_name")
            if not isinstance(file_name, str) or not file_name:
                continue
            if os.path.isabs(file_name):
                # A file on this machine, used where it is: still inside the allowed roots.
                entry_path, problems = self.check_server_path(file_name)
                if entry_path is None or problems:
                    continue
                if server_path and os.path.realpath(entry_path) == real:
                    return name
                try:
                    entry_size = os.stat(entry_path).st_size
                except OSError:
                    continue
            else:
                try:
                    found = lstat_in_run(self.folder, file_name)  # RocBoard's own copy: no link followed
                except OSError:  # a name that leaves the folder (an entry written by hand)
                    continue
                if found is None or not stat.S_ISREG(found.st_mode):
                    continue
                entry_path, entry_size = None, found.st_size
            if entry_size != size or size > self.max_upload_bytes:
                continue
            wanted_digest = candidate_digest()
            if wanted_digest is None:
                return None
            meta = ours if isinstance(ours := entry.get("rocboard"), dict) else {}
            stored = meta.get("sha256") if meta.get("bytes") == entry_size else None
            if stored is None:
                try:
                    if entry_path is None:
                        with opened(self.folder, file_name) as handle:
                            stored = _sha256(handle)
                    else:
                        with open(entry_path, "rb") as handle:
                            stored = _sha256(handle)
                except OSError:
                    continue
            if stored == wanted_digest:
                return name
        return None

    def _already(self, existing: str, inspection: Inspection) -> AddResult:
        return AddResult(None, (Finding.of("dataset_name", "data-already-added", name=repr(existing)),), inspection, existing)

    def _name_findings(self, name: str) -> tuple[list[Finding], list[Finding]]:
        """(findings that refuse `name` at once, the name-taken finding): a name already
        taken is said only after the file is known not to be that dataset already."""
        findings = self.check_name(name)
        taken = [f for f in findings if f.rule == "data-name-taken"]
        return [f for f in findings if f.rule != "data-name-taken"], taken

    # --- adding --------------------------------------------------------------------------------

    def add_upload(self, name: str, uploaded: Path, original_name: str, mapping: ColumnMapping | None = None) -> AddResult:
        findings, taken = self._name_findings(name)
        if findings:
            return AddResult(None, tuple(findings), None)
        inspection = self.inspect_upload(uploaded, original_name, mapping)
        if not inspection.usable or inspection.mapping is None:
            return AddResult(None, inspection.findings, inspection)
        existing = self.same_dataset(Path(uploaded), inspection.mapping)
        if existing is not None:
            return self._already(existing, inspection)
        if taken:
            return AddResult(None, tuple(taken), inspection)
        extension = os.path.splitext(_shown_name(original_name, uploaded))[1].lower() or Path(uploaded).suffix.lower()
        final = f"{name}{extension}"
        try:
            self._prepare_folder()
            temp, size, digest = self._copy_in(Path(uploaded), final)
        except _Refused as refused:
            return AddResult(None, tuple(refused.findings), inspection)
        except OSError as error:
            return AddResult(None, (self._unwritable(error),), inspection)
        placed = False
        try:
            with self._locked():
                info = self._read_info()
                if name in info:
                    raise _Refused([Finding.of("dataset_name", "data-name-taken", name=repr(name), suggestion=repr(_free_name(name, set(info))))])
                self._rename_in_files(temp, final)
                placed = True
                entry = dataset_info_entry(inspection.mapping, f"{FILES_DIRNAME}/{final}")
                entry["rocboard"] = {**_meta("upload", _shown_name(original_name, uploaded), inspection), "bytes": size, "sha256": digest}
                self._write_info({**info, name: entry})
        except _Refused as refused:
            self._remove_in_files(final if placed else temp)
            return AddResult(None, tuple(refused.findings), inspection)
        except BaseException as error:
            self._remove_in_files(final if placed else temp)
            if isinstance(error, OSError):
                return AddResult(None, (self._unwritable(error),), inspection)
            raise
        return AddResult(name, inspection.findings, inspection)

    def add_server_path(self, name: str, raw: str, mapping: ColumnMapping | None = None) -> AddResult:
        findings, taken = self._name_findings(name)
        if findings:
            return AddResult(None, tuple(findings), None)
        inspection = self.inspect_server_path(raw, mapping)
        if not inspection.usable or inspection.mapping is None:
            return AddResult(None, inspection.findings, inspection)
        existing = self.same_dataset(Path(inspection.source), inspection.mapping, server_path=True)
        if existing is not None:
            return self._already(existing, inspection)
        if taken:
            return AddResult(None, tuple(taken), inspection)
        try:
            self._prepare_folder()
            with self._locked():
                info = self._read_info()
                if name in info:
                    raise _Refused([Finding.of("dataset_name", "data-name-taken", name=repr(name), suggestion=repr(_free_name(name, set(info))))])
                entry = dataset_info_entry(inspection.mapping, str(inspection.source))
                entry["rocboard"] = _meta("path", str(inspection.source), inspection)
                try:
                    entry["rocboard"]["bytes"] = os.stat(inspection.source).st_size
                except OSError:
                    pass
                self._write_info({**info, name: entry})
        except _Refused as refused:
            return AddResult(None, tuple(refused.findings), inspection)
        except OSError as error:
            return AddResult(None, (self._unwritable(error),), inspection)
        return AddResult(name, inspection.findings, inspection)

    # --- the folder ----------------------------------------------------------------------------

    def _unwritable(self, error: OSError) -> Finding:
        return Finding.of("dataset_name", "data-registry-unwritable", folder=str(self.folder), error=os_error(error))

    def _prepare_folder(self) -> None:
        """datasets/ and datasets/files/, real directories (a link there is refused)."""
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        make_dir(self.runs_dir, DATASETS_DIRNAME)
        make_dir(self.folder, FILES_DIRNAME)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """An exclusive lock on datasets/.lock: one writer of dataset_info.json at a time,
        across threads (each holds its own open file) and processes."""
        fd = open_in_run(self.folder, LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write_info(self, info: dict[str, Any]) -> None:
        # json.dumps: the user's names and paths are data in the file, never code.
        data = json.dumps(info, ensure_ascii=False, indent=2).encode("utf-8") + b"\n"
        write_atomic(self.folder, DATASET_INFO, data)

    def _copy_in(self, uploaded: Path, final: str) -> tuple[str, int, str]:
        """Copies the upload into files/ under a hidden temporary name; returns that name, the
        bytes copied and their sha256. A block loop rather than shutil.copyfileobj: the copy
        stops at the upload limit (the file may have grown since it was checked)."""
        temp = f".{final}.{secrets.token_hex(8)}.part"
        dir_fd = open_dir_in_run(self.folder, FILES_DIRNAME)
        try:
            out_fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
            try:
                with open(uploaded, "rb") as source, os.fdopen(out_fd, "wb") as target:
                    copied = 0
                    digest = hashlib.sha256()
                    while block := source.read(COPY_BLOCK):
                        copied += len(block)
                        if copied > self.max_upload_bytes:
                            raise _Refused(
                                [Finding.of("data_file", "data-upload-too-big", file=final, size=f"{copied / 2**20:.1f}", limit=f"{self.max_upload_bytes / 2**20:.0f}")]
                            )
                        target.write(block)
                        digest.update(block)
                    target.flush()
                    os.fsync(target.fileno())
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=dir_fd)
                except OSError:
                    pass
                raise
        finally:
            os.close(dir_fd)
        return temp, copied, digest.hexdigest()

    def _rename_in_files(self, temp: str, final: str) -> None:
        dir_fd = open_dir_in_run(self.folder, FILES_DIRNAME)
        try:
            os.replace(temp, final, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        finally:
            os.close(dir_fd)

    def _remove_in_files(self, name: str) -> None:
        try:
            dir_fd = open_dir_in_run(self.folder, FILES_DIRNAME)
        except OSError:
            return
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)


def _shown_name(original_name: str, uploaded: Path) -> str:
    """The upload's own file name (no folders: the browser may send anything)."""
    name = os.path.basename(str(original_name or "").replace("\\", "/")).strip()
    return name[:255] or Path(uploaded).name


def _how_read(entry: dict[str, Any]) -> dict[str, Any]:
    """What of a dataset_info entry says how its file is read (formatting, columns, tags):
    all of it but the file and RocBoard's own notes."""
    return {key: value for key, value in entry.items() if key not in ("file_name", "rocboard")}


def _sha256(handle: Any) -> str:
    digest = hashlib.sha256()
    while block := handle.read(COPY_BLOCK):
        digest.update(block)
    return digest.hexdigest()


def _free_name(name: str, taken: set[str]) -> str:
    for number in range(2, 10_000):
        suffix = f"-{number}"
        candidate = f"{name[: 64 - len(suffix)]}{suffix}"
        if candidate not in taken:
            return candidate
    return f"{name[:55]}-{secrets.token_hex(4)}"


def _meta(source: str, original_name: str, inspection: Inspection) -> dict[str, Any]:
    return {
        "source": source,
        "original_name": original_name,
        "rows": inspection.rows,
        "layout": inspection.mapping.layout if inspection.mapping else None,
        "added": datetime.now(UTC).isoformat(timespec="seconds"),
    }


__all__ = ["DATASETS_DIRNAME", "AddResult", "DatasetRegistry"]
