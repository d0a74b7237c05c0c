"""What a dataset file holds, before RocBoard registers it for LLaMA-Factory.

A user uploads a file or names one on the server; `inspect_dataset` reads it with the readers
of backend/data/readers.py (bounded in time and memory), guesses its layout (alpaca, sharegpt,
openai, plain text: backend/data/layout.py), and checks every row against the column mapping
(backend/data/rows.py): each problem a `Finding` (key "data_file", message ids `data-*`) that
names the file, the line or row, and the fix. Only the preview rows are kept. The page runs it
in a process with a memory cap (backend/data/reading.py), where a MemoryError is a finding too.

It never imports Hugging Face `datasets` or LLaMA-Factory: the web process stays light.
"""

from __future__ import annotations

import codecs
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from backend.data.layout import (
    LAYOUTS,
    MAX_COLUMNS,
    ColumnMapping,
    _guess_named,
    _NearName,
    roles_of,
)
from backend.data.readers import DEFAULT_MAX_BYTES, KEY, MAX_ROWS, _kind, _mb, _names, _Reader, _Stop, _where
from backend.data.rows import _ALL_EMPTY_ROLES, MEDIA_COLUMNS, _cell, _is_empty, _layout_unknown, _mapping_findings, _RowCheck
from backend.findings import Finding
from backend.i18n import Message
from backend.i18n.errors import os_error

# The extensions LLaMA-Factory reads (extras/constants.py FILEEXT2TYPE) that RocBoard checks.
FORMATS = {".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
PREVIEW_ROWS = 20
# What the page's reading process may grow by (backend/data/reading.py sets its cap here).
READ_MEMORY_MIB = 256


@dataclass(frozen=True)
class Inspection:
    source: Path
    file_format: str
    rows: int
    columns: tuple[str, ...]
    empty_share: tuple[tuple[str, float], ...]  # per column: share of rows where it is empty/missing
    preview: tuple[tuple[str, ...], ...]  # first rows, cells in `columns` order, as text
    mapping: ColumnMapping | None  # the one given, else the guess
    findings: tuple[Finding, ...]
    guessed: bool = False  # the mapping is RocBoard's guess: the user confirms it

    @property
    def usable(self) -> bool:
        return not any(f.severity == "problem" for f in self.findings)


def _refused(path: Path, file_format: str, mapping: ColumnMapping | None, finding: Finding) -> Inspection:
    return Inspection(path, file_format, 0, (), (), (), mapping, (finding,))


def inspect_dataset(path: Path, shown_name: str, mapping: ColumnMapping | None = None, max_bytes: int = DEFAULT_MAX_BYTES) -> Inspection:
    """Reads the data file at `path` (named `shown_name` in messages), guesses its layout
    unless `mapping` is given, and checks every row. Never raises for bad data."""
    path = Path(path)
    extension = os.path.splitext(shown_name)[1].lower() or os.path.splitext(str(path))[1].lower()
    file_format = FORMATS.get(extension)
    if file_format is None:
        return _refused(path, "", mapping, Finding.of(KEY, "data-extension", file=shown_name, extension=repr(extension or "(none)"), accepted=", ".join(FORMATS)))
    try:
        info = os.stat(path)
    except OSError as error:
        return _refused(path, file_format, mapping, Finding.of(KEY, "data-unreadable", file=shown_name, error=os_error(error)))
    if not stat.S_ISREG(info.st_mode):
        return _refused(path, file_format, mapping, Finding.of(KEY, "data-unreadable", file=shown_name, error=Message("file-error.not-regular")))
    if info.st_size > max_bytes:
        return _refused(path, file_format, mapping, Finding.of(KEY, "data-too-big", file=shown_name, size=_mb(info.st_size), limit=_mb(max_bytes)))
    if info.st_size == 0:
        return _refused(path, file_format, mapping, Finding.of(KEY, "data-empty", file=shown_name))
    if file_format != "parquet":
        # Excel's "CSV UTF-8" starts with a byte order mark: Hugging Face's loaders keep it in
        # the first column's name (or fail on the JSON), so LLaMA-Factory would not find it.
        with open(path, "rb") as handle:
            if handle.read(3) == codecs.BOM_UTF8:
                return _refused(path, file_format, mapping, Finding.of(KEY, "data-bom", file=shown_name))
    try:
        return _inspect(path, file_format, shown_name, mapping, max_bytes)
    except OSError as error:
        return _refused(path, file_format, mapping, Finding.of(KEY, "data-unreadable", file=shown_name, error=os_error(error)))


def _inspect(path: Path, file_format: str, shown: str, given: ColumnMapping | None, max_bytes: int = DEFAULT_MAX_BYTES) -> Inspection:
    reader = _Reader(path, file_format, shown, decoded_max=max_bytes)
    findings: list[Finding] = []
    columns: dict[str, None] = {}  # in the order first seen

    # Pass 1: the first rows, for the preview and the guess (a cheap re-read of a few rows).
    first_rows: list[dict] = []
    preview_cells: list[dict[str, str]] = []
    try:
        for _, row in reader.rows():
            if not isinstance(row, dict):
                break
            first_rows.append(row)
            preview_cells.append({str(k): _cell(v) for k, v in row.items()})
            if len(first_rows) >= PREVIEW_ROWS:
                break
    except _Stop:
        pass  # pass 2 meets it again and reports it with the rows counted so far
    except MemoryError:
        first_rows, preview_cells = [], []
        where = _where(reader.unit, max(reader.at, 1))  # not read twice: it took the whole cap once
        return Inspection(path, reader.file_format, 0, (), (), (), given, (Finding.of(KEY, "data-memory", file=shown, where=where, limit=f"{memory_cap_mib()}"),))
    first_columns = list(dict.fromkeys(str(k) for row in first_rows for k in row))
    guessed = False
    mapping = given
    alias = False
    near: tuple[_NearName, ...] = ()
    if mapping is None:
        mapping, alias, near = _guess_named(first_columns, first_rows, near_names=True)
        guessed = mapping is not None
    first_rows = []  # not kept past the guess: a row may be megabytes

    # Pass 2: every row, streaming; only counts and first row numbers are kept.
    check = _RowCheck(mapping, reader.unit) if mapping is not None and mapping.layout in LAYOUTS else None
    filled: dict[str, int] = {}
    rows = 0
    stopped: Finding | None = None
    try:
        for number, row in reader.rows():
            if not isinstance(row, dict):
                stopped = Finding.of(KEY, "data-row-not-object", file=shown, where=_where(reader.unit, number), kind=_kind(row))
                break
            rows += 1
            if rows > MAX_ROWS:
                stopped = Finding.of(KEY, "data-too-many-rows", message="data-too-many-rows-read", file=shown, where=_where(reader.unit, number), limit=f"{MAX_ROWS:,}")
                rows -= 1
                break
            for name, value in row.items():
                name = str(name)
                if name not in columns:
                    if len(columns) >= MAX_COLUMNS:
                        continue
                    columns[name] = None
                if not _is_empty(value):
                    filled[name] = filled.get(name, 0) + 1
            if check is not None:
                check.add(number, row)
    except _Stop as stop:
        stopped = stop.finding
    except MemoryError:
        # Under the reading process's memory cap (backend/data/reading.py): one row held more
        # than the cap allows (millions of tiny values, a field the checks could not see).
        stopped = Finding.of(KEY, "data-memory", file=shown, where=_where(reader.unit, max(reader.at, 1)), limit=f"{memory_cap_mib()}")
    column_list = tuple(columns)
    empty_share = tuple((c, round(1 - filled.get(c, 0) / rows, 4) if rows else 1.0) for c in column_list)
    preview = tuple(tuple(cells.get(c, "") for c in column_list) for cells in preview_cells)

    def result(found: list[Finding], shown_mapping: ColumnMapping | None = None) -> Inspection:
        return Inspection(path, reader.file_format, rows, column_list, empty_share, preview, shown_mapping or mapping, tuple(found), guessed)

    if stopped is not None:
        return result([stopped])
    if rows == 0:
        return result([Finding.of(KEY, "data-empty", file=shown)])
    media = [c for c in column_list if c.lower() in MEDIA_COLUMNS]
    if media:
        findings.append(Finding.of(KEY, "data-multimodal", file=shown, columns=_names(media)))
    if mapping is None:
        findings.append(_layout_unknown(list(column_list), shown))
        return result(findings)
    bad_mapping = _mapping_findings(mapping, list(column_list), shown)
    if bad_mapping:
        return result(findings + bad_mapping)
    # A role's column empty in every row: the model would learn from nothing there. RocBoard's
    # own guess leaves an optional one out (an alpaca "input" nobody filled); a required one,
    # or one the user chose, is a problem.
    shares = dict(empty_share)
    dropped: list[str] = []
    kept: list[tuple[str, str]] = []
    required = dict(roles_of(mapping.layout))
    for role, column in mapping.columns:
        if (role in _ALL_EMPTY_ROLES if mapping.layout == "alpaca" else role == "system") and shares.get(column, 1.0) >= 1.0:
            if guessed and not required.get(role, False):
                dropped.append(column)
                findings.append(Finding.of(KEY, "data-column-all-empty", message="data-column-all-empty-left-out", severity="warning", file=shown, column=repr(column), role=role))
                continue
            findings.append(Finding.of(KEY, "data-column-all-empty", file=shown, column=repr(column), role=role))
        kept.append((role, column))
    if dropped:
        mapping = ColumnMapping(mapping.layout, tuple(kept), mapping.tags)
    for read in near:
        if (read.role, read.column) in mapping.columns:
            findings.insert(0, Finding.of(KEY, "data-column-near-name", severity="warning", file=shown, column=repr(read.column), name=repr(read.name), role=read.role))
    all_empty = {(f.params or {}).get("column") for f in findings if f.rule == "data-column-all-empty" and f.severity == "problem"}
    if alias:
        pairs = ", ".join(f"{role} ← {column!r}" for role, column in mapping.columns)
        findings.append(Finding.of(KEY, "data-layout-guessed", severity="warning", file=shown, layout=mapping.layout, pairs=pairs))
    if check is not None:
        # An all-empty prompt column already says what "neither an instruction nor an input" would.
        findings += [f for f in check.findings(shown) if not (f.rule == "data-prompt-empty" and repr((f.params or {}).get("column")) in all_empty)]
    for role, column in mapping.columns:
        if role in ("prompt", "messages") and 0.5 < shares.get(column, 0) < 1:
            findings.append(Finding.of(KEY, "data-column-mostly-empty", severity="warning", file=shown, column=repr(column), share=f"{shares[column] * 100:.0f}"))
    mapped = {column for _, column in mapping.columns}
    unread = [c for c in column_list if c not in mapped and c not in media and c not in dropped]
    if unread:
        findings.append(Finding.of(KEY, "data-columns-unread", severity="warning", file=shown, columns=_names(unread)))
    return result(findings, mapping)


def memory_cap_mib() -> int:
    """The memory a reading process may take beyond what it started with, in MiB (what a
    `data-memory` finding names): the reading process sets READ_MEMORY_MIB to its own cap."""
    return READ_MEMORY_MIB


__all__ = ["DEFAULT_MAX_BYTES", "FORMATS", "KEY", "Inspection", "inspect_dataset", "memory_cap_mib"]
