"""What a dataset file holds, before RocBoard registers it for LLaMA-Factory.

A user uploads a file or names one on the server; this module reads it (bounded in time and
memory: JSONL line by line, CSV in pandas chunks of about CSV_CHUNK_BYTES, Parquet in pyarrow
batches sized from its metadata, a .json list element by element; what a line, a row, its
nesting, the rows and a Parquet file's footer allow is checked before it is decoded), guesses
its layout (alpaca, sharegpt, openai, plain text), and checks every row against the column
mapping: each problem a `Finding` (key "data_file", message ids `data-*`) that names the file,
the line or row, and the fix. Only the preview rows are kept. The page runs it in a process
with a memory cap (backend/data/reading.py), where a MemoryError is a finding too.

It never imports Hugging Face `datasets` or LLaMA-Factory: the web process stays light.
"""

from __future__ import annotations

import codecs
import difflib
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.data.layout import (
    DEFAULT_TAGS,
    KNOWN_NAMES,
    LAYOUTS,
    OPENAI_ROLES,
    OPENAI_TAGS,
    PROMPT_NAMES,
    RESPONSE_NAMES,
    SHAREGPT_ROLES,
    SHAREGPT_TAGS,
    TAG_NAMES,
    TEXT_NAMES,
    ColumnMapping,
    dataset_info_entry,
    default_tags,
    roles_of,
)
from backend.findings import Finding
from backend.i18n import Message
from backend.i18n.errors import json_problem, os_error

# The extensions LLaMA-Factory reads (extras/constants.py FILEEXT2TYPE) that RocBoard checks.
FORMATS = {".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
KEY = "data_file"  # the finding key of every problem in a data file

DEFAULT_MAX_BYTES = 4 * 2**30  # a file over this is not read at all (minutes of checking)
JSON_MAX_BYTES = DEFAULT_MAX_BYTES  # a .json list is parsed element by element (_json), like JSONL
JSON_CHUNK_CHARS = 1 << 20  # characters read at a time from a .json file
LINE_MAX_BYTES = 16 * 2**20  # one JSONL line, one CSV line, one .json element, one decoded Parquet row
MAX_ROWS = 5_000_000  # rows checked in any file (a Parquet file's count is read before any row)
MAX_DEPTH = 100  # lists and objects nested in one row (a training row needs 3 or 4)
PREVIEW_ROWS = 20
CELL_CHARS = 300
SHOWN_ROWS = 5  # row numbers a message names before "and N more"
MAX_COLUMNS = 1000  # columns tracked of rows whose keys all differ; a CSV or Parquet header holds at most this
MAX_ROLES = 50  # distinct role names remembered
CSV_CHUNK_ROWS = 2000
CSV_CHUNK_BYTES = 16 * 2**20  # a chunk holds fewer rows when lines are long: about this many bytes
PARQUET_BATCH_ROWS = 1000
PARQUET_BATCH_BYTES = 16 * 2**20  # decoded bytes turned into Python rows at a time
PARQUET_VALUE_COST = 32  # what one decoded value costs in Python beyond its bytes (counted, not measured)
PARQUET_DICTIONARY_READ_MAX = 64 * 2**20  # a column chunk's dictionary is read ahead only up to this
# What the page's reading process may grow by (backend/data/reading.py sets its cap here).
READ_MEMORY_MIB = 256
# A column name within a near miss of a role's name is read as that role ("instrution").
NEAR_NAME_CUTOFF = 0.8
# Columns of images, videos or audio: LLaMA-Factory trains them with a multimodal model only.
MEDIA_COLUMNS = ("images", "videos", "audios", "image", "video", "audio")



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


# --- helpers ----------------------------------------------------------------------------------


class _Stop(Exception):
    """Reading cannot go on: the finding says why."""

    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.problem)
        self.finding = finding


def _where(unit: str, number: int) -> Message:
    return Message(f"data.where.{unit}", n=number)


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f}"


def _is_empty(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple, dict)):
        return len(value) == 0
    return False


def _kind(value: Any) -> Message:
    """A JSON-ish name of a value's type, for messages (in the page's language)."""
    if value is None:
        return Message("data.kind.null")
    if isinstance(value, bool):
        return Message("data.kind.boolean")
    if isinstance(value, (int, float)):
        return Message("data.kind.number")
    if isinstance(value, str):
        return Message("data.kind.text")
    if isinstance(value, (list, tuple)):
        return Message("data.kind.list")
    if isinstance(value, dict):
        return Message("data.kind.object")
    return Message("data.kind.other", name=type(value).__name__)


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = ""
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


def _names(values: Any, limit: int = 12) -> str:
    values = list(values)
    shown = ", ".join(repr(v) for v in values[:limit])
    return shown + (f", … (+{len(values) - limit})" if len(values) > limit else "") if values else "(none)"


@dataclass(frozen=True)
class _Scan:
    """What one streaming pass over a text file's bytes found."""

    not_utf8: tuple[int, int, str] | None  # (byte offset, line, the byte) of the first byte that is not UTF-8
    lines: int  # newlines counted before the scan stopped
    long_line: int | None  # the first line longer than LINE_MAX_BYTES


def _scan(path: Path) -> _Scan:
    """The first byte that is not UTF-8 and the first line over LINE_MAX_BYTES, in one pass
    of 1 MiB blocks (a line is only measured at block edges: inside a block every line is
    shorter than the block, unless the limit is smaller, as tests make it)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    limit = LINE_MAX_BYTES
    block_size = 1 << 20
    offset = 0
    lines = 1
    run = 0  # bytes of the line in progress
    with open(path, "rb") as handle:
        while True:
            block = handle.read(block_size)
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as error:
                data = error.object
                return _Scan((offset - pending + error.start, lines + data[: error.start].count(b"\n"), f"0x{data[error.start]:02x}"), lines, None)
            if not block:
                return _Scan(None, lines, None)
            first = block.find(b"\n")
            if first < 0:
                run += len(block)
                if run > limit:
                    return _Scan(None, lines, lines)
            else:
                if run + first > limit:
                    return _Scan(None, lines, lines)
                if limit < block_size:
                    for number, piece in enumerate(block.split(b"\n")[1:-1], start=1):
                        if len(piece) > limit:
                            return _Scan(None, lines + number, lines + number)
                newlines = block.count(b"\n")
                run = len(block) - block.rfind(b"\n") - 1
                lines += newlines
                if run > limit:
                    return _Scan(None, lines, lines)
            offset += len(block)


def _utf8_error(path: Path) -> tuple[int, int, str] | None:
    """(byte offset, line, the byte) of the first byte that is not UTF-8, streaming."""
    return _scan(path).not_utf8


def _nesting_deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects nest more than `limit` levels in `value` (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _brackets(text: str, start: int = 0, end: int | None = None) -> int:
    end = len(text) if end is None else end
    return text.count("[", start, end) + text.count("{", start, end)


# --- reading rows -----------------------------------------------------------------------------


class _Reader:
    """Rows of one file: (number, row) where the number counts lines (JSONL) or rows.

    Every read is bounded before it decodes: a line or .json element at most LINE_MAX_BYTES,
    nesting at most MAX_DEPTH, at most MAX_ROWS rows; a CSV chunk holds about CSV_CHUNK_BYTES;
    a Parquet file's row count and column sizes are read from its metadata first, and each
    batch's decoded size is counted before it becomes Python rows (`decoded_max` in all)."""

    def __init__(self, path: Path, file_format: str, shown: str, decoded_max: int = DEFAULT_MAX_BYTES) -> None:
        self.path = path
        self.file_format = file_format
        self.shown = shown
        self.unit = "line" if file_format == "jsonl" else "row"
        self.decoded_max = decoded_max
        self.at = 0  # the line or row being read (named when reading it runs out of memory)
        self._scanned: _Scan | None = None

    def rows(self) -> Iterator[tuple[int, Any]]:
        if self.file_format == "jsonl":
            return self._jsonl()
        if self.file_format == "json":
            return self._json()
        if self.file_format == "csv":
            return self._csv()
        return self._parquet()

    def _not_utf8(self, offset: int, line: int, byte: str) -> _Stop:
        return _Stop(Finding.of(KEY, "data-not-utf8", file=self.shown, offset=offset, line=line, byte=byte))

    def _too_deep(self, number: int) -> _Stop:
        return _Stop(Finding.of(KEY, "data-json-too-deep", file=self.shown, where=_where(self.unit, number), limit=MAX_DEPTH))

    def _scan_once(self) -> _Scan:
        if self._scanned is None:
            self._scanned = _scan(self.path)
        if self._scanned.not_utf8 is not None:
            raise self._not_utf8(*self._scanned.not_utf8)
        return self._scanned

    def _jsonl(self) -> Iterator[tuple[int, Any]]:
        offset = 0
        with open(self.path, "rb") as handle:
            number = 0
            while True:
                raw = handle.readline(LINE_MAX_BYTES + 1)
                if not raw:
                    return
                number += 1
                self.at = number
                if len(raw) > LINE_MAX_BYTES and not raw.endswith(b"\n"):
                    raise _Stop(Finding.of(KEY, "data-line-too-long", file=self.shown, line=number, limit=_mb(LINE_MAX_BYTES)))
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise self._not_utf8(offset + error.start, number, f"0x{raw[error.start]:02x}") from None
                offset += len(raw)
                if not text.strip():
                    continue  # a blank line is no row (Arrow's JSON reader skips it too)
                try:
                    row = json.loads(text)
                except RecursionError:
                    raise self._too_deep(number) from None
                except ValueError as error:
                    detail = json_problem(error.msg) if isinstance(error, json.JSONDecodeError) else Message("json-error.other")
                    column = getattr(error, "colno", 0)
                    raise _Stop(Finding.of(KEY, "data-json-invalid", file=self.shown, line=number, column=column, error=detail)) from None
                if _brackets(text) > MAX_DEPTH and _nesting_deeper_than(row, MAX_DEPTH):
                    raise self._too_deep(number)
                yield number, row

    def _json(self) -> Iterator[tuple[int, Any]]:
        """The elements of a top-level JSON list, one at a time: the file is read in chunks of
        JSON_CHUNK_CHARS and each element decoded as soon as it is whole, so memory holds one
        element (at most LINE_MAX_BYTES), never the file. A file of JSON lines named .json is
        read as JSONL (Hugging Face's json loader reads those too)."""
        size = self.path.stat().st_size
        if size > JSON_MAX_BYTES:
            raise _Stop(Finding.of(KEY, "data-json-too-big", file=self.shown, size=_mb(size), limit=_mb(JSON_MAX_BYTES)))
        if self._scanned is None:
            found = _utf8_error(self.path)
            if found is not None:
                raise self._not_utf8(*found)
            self._scanned = _Scan(None, 0, None)
        stream = _JsonStream(self.path, self.shown)
        first = stream.next_char()
        self.at = 1
        if first != "[":
            value = stream.value()
            if isinstance(value, dict):
                if stream.next_char() == "{":  # a second object follows: JSON lines
                    self.file_format = "jsonl"
                    self.unit = "line"
                    yield from self._jsonl()
                    return
                stream.expect_end()
                raise _Stop(Finding.of(KEY, "data-json-not-list", file=self.shown, keys=_names(value.keys(), 8)))
            raise _Stop(Finding.of(KEY, "data-row-not-object", file=self.shown, where=Message("data.where.whole"), kind=_kind(value)))
        stream.take(1)
        number = 0
        if stream.next_char() == "]":
            stream.take(1)
            stream.expect_end()
            return
        while True:
            number += 1
            self.at = number
            row = stream.value()
            yield number, row
            after = stream.next_char()
            if after == ",":
                stream.take(1)
                continue
            if after == "]":
                stream.take(1)
                stream.expect_end()
                return
            stream.fail("Expecting ',' delimiter" if after else "Expecting value")

    def _csv(self) -> Iterator[tuple[int, Any]]:
        import pandas as pd

        scan = self._scan_once()
        if scan.long_line is not None:
            raise _Stop(Finding.of(KEY, "data-line-too-long", message="data-csv-line-too-long", file=self.shown, line=scan.long_line, limit=_mb(LINE_MAX_BYTES)))
        # Long lines, fewer rows a chunk: a chunk holds about CSV_CHUNK_BYTES, not 2,000 lines of 16 MB.
        size = self.path.stat().st_size
        chunk_rows = max(1, min(CSV_CHUNK_ROWS, CSV_CHUNK_BYTES * max(scan.lines, 1) // max(size, 1)))
        number = 0
        try:
            # Every cell as text, nothing turned into NaN: emptiness is judged on the text.
            header = pd.read_csv(self.path, nrows=0, dtype=str, keep_default_na=False, na_filter=False, encoding="utf-8")
            if len(header.columns) > MAX_COLUMNS:
                raise _Stop(Finding.of(KEY, "data-too-many-columns", file=self.shown, columns=f"{len(header.columns):,}", limit=f"{MAX_COLUMNS:,}"))
            chunks = pd.read_csv(self.path, chunksize=chunk_rows, dtype=str, keep_default_na=False, na_filter=False, encoding="utf-8")
            for chunk in chunks:
                for row in chunk.to_dict("records"):
                    number += 1
                    self.at = number + 1
                    yield number, row
                self.at = number + 1
        except pd.errors.EmptyDataError:
            return
        except pd.errors.ParserError as error:
            text = str(error).strip()
            found = re.search(r"in line (\d+)", text)
            line = int(found.group(1)) if found else number + 2
            if "out of memory" in text.lower():
                raise MemoryError(text) from None
            raise _Stop(Finding.of(KEY, "data-csv-malformed", file=self.shown, line=line, error=text.splitlines()[-1] if text else "")) from None

    def _parquet(self) -> Iterator[tuple[int, Any]]:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            # buffer_size: column chunks are streamed, never read whole into memory.
            parquet = pq.ParquetFile(self.path, buffer_size=1 << 20, pre_buffer=False)
        except MemoryError:
            raise
        except (pa.ArrowException, OSError, ValueError) as error:
            raise _Stop(Finding.of(KEY, "data-parquet-bad", file=self.shown, error=str(error)[:300])) from None
        number = 0
        decoded = 0
        try:
            plan = _ParquetPlan(parquet, self.path, self.shown, self.decoded_max)
            for group, batch_rows in plan.groups:
                for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=[group], use_threads=False):
                    self.at = number + 1
                    costs = _row_costs(batch)
                    big = np.flatnonzero(costs > LINE_MAX_BYTES)
                    if big.size:
                        row = number + int(big[0]) + 1
                        raise _Stop(
                            Finding.of(KEY, "data-row-too-big", file=self.shown, where=_where("row", row), size=_mb(int(costs[big[0]])), limit=_mb(LINE_MAX_BYTES))
                        )
                    running = decoded + np.cumsum(costs)
                    if running.size and running[-1] > self.decoded_max:
                        row = number + int(np.searchsorted(running, self.decoded_max, side="right")) + 1
                        raise _Stop(
                            Finding.of(KEY, "data-decoded-too-big", file=self.shown, where=_where("row", row), limit=_mb(self.decoded_max))
                        )
                    # Python rows a slice at a time: each slice decodes to about PARQUET_BATCH_BYTES.
                    start = 0
                    while start < batch.num_rows:
                        done = running[start - 1] if start else decoded
                        end = max(start + 1, int(np.searchsorted(running, done + PARQUET_BATCH_BYTES, side="right")))
                        for row in batch.slice(start, end - start).to_pylist():
                            number += 1
                            self.at = number
                            yield number, row
                        start = end
                    decoded = int(running[-1]) if running.size else decoded
        except MemoryError:
            raise
        except (pa.ArrowException, OSError, ValueError) as error:
            raise _Stop(Finding.of(KEY, "data-parquet-bad", file=self.shown, error=str(error)[:300])) from None
        finally:
            parquet.close()


def _row_costs(batch: Any) -> Any:
    """What each row of an Arrow record batch costs once decoded into Python (numpy int64):
    the bytes of its text and binary values plus PARQUET_VALUE_COST per value, counted from
    the Arrow arrays (a dictionary's values by their indices) without decoding any."""
    import numpy as np

    total = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        total += _array_costs(column)
    return total


def _array_costs(array: Any) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    count = len(array)
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    if pa.types.is_dictionary(kind):
        values = _array_costs(array.dictionary)
        if len(values) == 0:
            return np.full(count, PARQUET_VALUE_COST, dtype=np.int64)
        indices = array.indices if array.null_count == 0 else pc.fill_null(array.indices, 0)
        return values[indices.to_numpy(zero_copy_only=False).astype(np.int64)]
    if _is_text(kind):
        if not (pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)):
            array = array.cast(pa.large_binary())  # a view type: binary_length has no kernel for it
        lengths = pc.binary_length(array)
        if array.null_count:
            lengths = pc.fill_null(lengths, 0)
        return lengths.to_numpy(zero_copy_only=False).astype(np.int64) + PARQUET_VALUE_COST
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        child = _array_costs(array.values)
        summed = np.concatenate(([0], np.cumsum(child)))
        return summed[offsets[1:]] - summed[offsets[:-1]] + PARQUET_VALUE_COST
    if pa.types.is_fixed_size_list(kind):
        size = kind.list_size
        child = _array_costs(array.flatten())
        return child.reshape(count, size).sum(axis=1) + PARQUET_VALUE_COST if size else np.full(count, PARQUET_VALUE_COST, dtype=np.int64)
    if pa.types.is_struct(kind):
        total = np.full(count, PARQUET_VALUE_COST, dtype=np.int64)
        for field in array.flatten():
            total += _array_costs(field)
        return total
    try:
        width = max(1, kind.bit_width // 8)
    except ValueError:
        width = max(1, array.nbytes // count)
    return np.full(count, width + PARQUET_VALUE_COST, dtype=np.int64)


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    views = (getattr(pa.types, "is_string_view", None), getattr(pa.types, "is_binary_view", None))
    return (
        pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
        or any(test is not None and test(kind) for test in views)
    )


class _ParquetPlan:
    """A Parquet file judged by its metadata before any row is decoded: its row count, its
    columns, what its column chunks hold uncompressed, and what a dictionary-encoded text
    column decodes to at least (its shortest dictionary value, once per row that uses it).
    `groups`: (row group, rows per batch) with each batch about PARQUET_BATCH_BYTES decoded."""

    def __init__(self, parquet: Any, path: Path, shown: str, decoded_max: int) -> None:
        metadata = parquet.metadata
        if metadata.num_rows > MAX_ROWS:
            raise _Stop(Finding.of(KEY, "data-too-many-rows", file=shown, rows=f"{metadata.num_rows:,}", limit=f"{MAX_ROWS:,}"))
        if metadata.num_columns > MAX_COLUMNS:
            raise _Stop(Finding.of(KEY, "data-too-many-columns", file=shown, columns=f"{metadata.num_columns:,}", limit=f"{MAX_COLUMNS:,}"))
        uncompressed = sum(metadata.row_group(g).column(c).total_uncompressed_size for g in range(metadata.num_row_groups) for c in range(metadata.num_columns))
        if uncompressed > decoded_max:
            raise _Stop(Finding.of(KEY, "data-decoded-too-big", message="data-decoded-too-big-metadata", file=shown, size=_mb(uncompressed), limit=_mb(decoded_max)))
        schema = metadata.schema
        # Top-level text columns written with a dictionary: their dictionaries are read ahead.
        texts = [c for c in range(metadata.num_columns) if schema.column(c).physical_type == "BYTE_ARRAY" and "." not in schema.column(c).path]
        self.groups: list[tuple[int, int]] = []
        first_row = 1
        at_least = 0
        with_dictionaries = None
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            rows = row_group.num_rows
            if rows <= 0:
                continue
            plain = 0  # uncompressed bytes of the chunks without a dictionary
            per_row = 0.0  # a row's decoded bytes, as far as the metadata can tell
            ahead = []
            for c in range(row_group.num_columns):
                chunk = row_group.column(c)
                size = chunk.total_uncompressed_size
                if not chunk.has_dictionary_page:
                    plain += size
                    per_row += size / rows
                elif c in texts and size <= PARQUET_DICTIONARY_READ_MAX:
                    ahead.append(c)
                else:
                    per_row += size / rows
            if plain / rows > LINE_MAX_BYTES:
                where = Message("data.where.rows", n=f"{first_row:,}-{first_row + rows - 1:,}")
                raise _Stop(Finding.of(KEY, "data-row-too-big", message="data-row-too-big-average", file=shown, where=where, size=_mb(int(plain / rows)), limit=_mb(LINE_MAX_BYTES)))
            if ahead:
                import pyarrow.parquet as pq

                if with_dictionaries is None:
                    names = [schema.column(c).path for c in texts]
                    with_dictionaries = pq.ParquetFile(path, read_dictionary=names, buffer_size=1 << 20, pre_buffer=False)
                names = [schema.column(c).path for c in ahead]
                first = next(with_dictionaries.iter_batches(batch_size=1, row_groups=[group], columns=names, use_threads=False), None)
                for c, name in zip(ahead, names):
                    column = first.column(name) if first is not None else None
                    dictionary = getattr(column, "dictionary", None)
                    if dictionary is None or len(dictionary) == 0:
                        per_row += row_group.column(c).total_uncompressed_size / rows
                        continue
                    lengths = _array_costs(dictionary) - PARQUET_VALUE_COST
                    shortest, longest = int(lengths.min()), int(lengths.max())
                    per_row += longest + PARQUET_VALUE_COST
                    used = self._rows_using_dictionary(row_group.column(c), schema.column(c), int(lengths.sum()) + 4 * len(lengths))
                    if used and shortest > LINE_MAX_BYTES:
                        raise _Stop(Finding.of(KEY, "data-row-too-big", file=shown, where=_where("row", first_row), size=_mb(shortest), limit=_mb(LINE_MAX_BYTES)))
                    at_least += used * (shortest + PARQUET_VALUE_COST)
                if at_least > decoded_max:
                    raise _Stop(Finding.of(KEY, "data-decoded-too-big", message="data-decoded-too-big-metadata", file=shown, size=_mb(at_least), limit=_mb(decoded_max)))
            self.groups.append((group, max(1, min(PARQUET_BATCH_ROWS, int(PARQUET_BATCH_BYTES / max(per_row, 1.0))))))
            first_row += rows
        if with_dictionaries is not None:
            with_dictionaries.close()

    @staticmethod
    def _rows_using_dictionary(chunk: Any, column: Any, dictionary_bytes: int) -> int:
        """At least how many values of a column chunk are read from its dictionary: all but
        the nulls and any written plainly after it (each of those costs 4 bytes at least of
        what the chunk holds beyond its dictionary). 0 when the null count is unknown."""
        if column.max_definition_level == 0:
            nulls = 0
        else:
            statistics = chunk.statistics
            if statistics is None or not statistics.has_null_count:
                return 0
            nulls = statistics.null_count
        plain_at_most = max(0, chunk.total_uncompressed_size - dictionary_bytes) // 4
        return max(0, chunk.num_values - nulls - plain_at_most)


_JSON_SPACE = re.compile(r"[ \t\r\n]*")


class _JsonStream:
    """A JSON text read forward in chunks: whitespace skipped, one value decoded at a time,
    the line of any error counted from the start of the file."""

    def __init__(self, path: Path, shown: str) -> None:
        self.handle = open(path, encoding="utf-8")
        self.shown = shown
        self.buffer = ""
        self.position = 0
        self.line = 1  # the line self.buffer[0] is on
        self.eof = False
        self.decoder = json.JSONDecoder()

    def __del__(self) -> None:
        self.handle.close()

    def _more(self, chars: int = 0) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(max(JSON_CHUNK_CHARS, chars))
        if not chunk:
            self.eof = True
            return False
        # What was read and decoded is dropped: the buffer holds the element in progress.
        dropped = self.buffer[: self.position]
        self.line += dropped.count("\n")
        self.buffer = self.buffer[self.position :] + chunk
        self.position = 0
        return True

    def next_char(self) -> str:
        """The next character that is not whitespace ("" at the end), not consumed."""
        while True:
            self.position = _JSON_SPACE.match(self.buffer, self.position).end()
            if self.position < len(self.buffer):
                return self.buffer[self.position]
            if not self._more():
                return ""

    def take(self, count: int) -> None:
        self.position += count

    def value(self) -> Any:
        """The next JSON value, decoded whole (nested at most MAX_DEPTH levels)."""
        self.next_char()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buffer, self.position)
            except RecursionError:
                raise self._too_deep() from None
            except json.JSONDecodeError as error:
                # An error at the end of what is read may only mean the value goes on.
                pending = len(self.buffer) - self.position
                if pending > LINE_MAX_BYTES:
                    raise _Stop(Finding.of(KEY, "data-line-too-long", file=self.shown, line=self._line_at(self.position), limit=_mb(LINE_MAX_BYTES))) from None
                # As much again as is pending (up to the limit): a long element is decoded a
                # few times over, not once per chunk.
                if self._more(min(pending, LINE_MAX_BYTES + 1 - pending)):
                    continue
                self.fail(json_problem(error.msg), error.pos)
            if _brackets(self.buffer, self.position, end) > MAX_DEPTH and _nesting_deeper_than(value, MAX_DEPTH):
                raise self._too_deep()
            self.position = end
            return value

    def _line_at(self, at: int) -> int:
        return self.line + self.buffer.count("\n", 0, at)

    def _too_deep(self) -> _Stop:
        where = _where("line", self._line_at(self.position))
        return _Stop(Finding.of(KEY, "data-json-too-deep", file=self.shown, where=where, limit=MAX_DEPTH))

    def expect_end(self) -> None:
        if self.next_char():
            self.fail(json_problem("Extra data"))

    def fail(self, message: str, at: int | None = None) -> None:
        at = self.position if at is None else at
        line = self.line + self.buffer.count("\n", 0, at)
        column = at - (self.buffer.rfind("\n", 0, at) + 1) + 1
        raise _Stop(Finding.of(KEY, "data-json-invalid", file=self.shown, line=line, column=column, error=message))


# --- guessing the layout ----------------------------------------------------------------------


def _find(columns: list[str], names: tuple[str, ...], allowed: set[str] | None = None, near: dict[str, str] | None = None) -> str | None:
    """The first of `names` among `columns`, as `_find_named`."""
    found = _find_named(columns, names, allowed, near)
    return found[0] if found else None


def _find_named(columns: list[str], names: tuple[str, ...], allowed: set[str] | None = None, near: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(column, the name it was found by), as `_find`: the names in their order, each spelt
    exactly, then in any case, then nearly (so "instrution" is the instruction before an
    "input" is taken for one)."""
    pool = [c for c in columns if allowed is None or c in allowed]
    lowered = {c.lower(): c for c in pool}
    for name in names:
        if name in pool:
            return name, name
        if name in lowered:
            return lowered[name], name
        column = (near or {}).get(name)
        if column is not None and column in pool:
            return column, name
    return None


def _near_names(columns: list[str]) -> dict[str, str]:
    """Known role names -> the column whose header is a near miss of one ("instrution" ->
    "instruction"), for names no column spells out (first such column wins)."""
    lowered = {c.lower() for c in columns}
    near: dict[str, str] = {}
    for column in columns[:MAX_COLUMNS]:
        if column.lower() in KNOWN_NAMES or len(column) > 64:
            continue
        close = difflib.get_close_matches(column.lower(), KNOWN_NAMES, n=1, cutoff=NEAR_NAME_CUTOFF)
        if close and close[0] not in lowered and close[0] not in near:
            near[close[0]] = column
    return near


def _turn_keys(rows: list[dict], column: str) -> tuple[set[str], set[str]] | None:
    """(keys of the turns, roles seen) when `column` holds lists of objects in these rows."""
    keys: set[str] = set()
    roles: set[str] = set()
    seen = False
    for row in rows:
        value = row.get(column)
        if not isinstance(value, list) or not value:
            continue
        if not all(isinstance(turn, dict) for turn in value):
            return None
        seen = True
        for turn in value:
            keys.update(turn)
            for tag in ("from", "role"):
                if isinstance(turn.get(tag), str) and len(roles) < MAX_ROLES:
                    roles.add(turn[tag])
    return (keys, roles) if seen else None


@dataclass(frozen=True)
class _NearName:
    column: str  # the file's header
    name: str  # the role's name it nearly spells
    role: str  # the LLaMA-Factory role it is read as


def _guess(columns: list[str], rows: list[dict], near_names: bool = False) -> tuple[ColumnMapping | None, bool]:
    """(mapping, whether it rests on an alias) from the first rows; the first row's keys
    decide the layout's required columns (so a file that mixes layouts reads as its first).
    With `near_names`, a header one letter or so off a role's name is read as that name."""
    mapping, alias, _ = _guess_named(columns, rows, near_names)
    return mapping, alias


def _guess_named(columns: list[str], rows: list[dict], near_names: bool = False) -> tuple[ColumnMapping | None, bool, tuple[_NearName, ...]]:
    """`_guess`, and the headers read by a near miss of a role's name."""
    if not rows:
        return None, False, ()
    first = set(rows[0]) if isinstance(rows[0], dict) else set(columns)
    system = _find(columns, ("system",))
    # Conversations: a column of lists of turns.
    for column in [c for c in ("conversations", "messages") if c in first] + [c for c in columns if c in first]:
        found = _turn_keys(rows, column)
        if found is None:
            continue
        keys, roles = found
        if {"from", "value"} <= keys:
            layout, tags = "sharegpt", dict(SHAREGPT_TAGS)
            if roles and roles <= OPENAI_ROLES and not roles & {"human", "gpt"}:
                tags.update(user_tag="user", assistant_tag="assistant")
        elif {"role", "content"} <= keys:
            layout, tags = "openai", dict(OPENAI_TAGS)
            if roles and roles <= SHAREGPT_ROLES and not roles & {"user", "assistant"}:
                tags.update(user_tag="human", assistant_tag="gpt")
        else:
            continue
        alias = column not in ("conversations", "messages") or tags != dict(DEFAULT_TAGS[layout])
        mapped = (("messages", column),) + ((("system", system),) if system else ())
        return ColumnMapping(layout, mapped, tuple(tags.items())), alias, ()
    # A conversations/messages column that holds no list (text in a CSV): read it as one, so
    # the rows' check says what each row holds instead of "layout not found".
    for column, layout in (("conversations", "sharegpt"), ("messages", "openai")):
        if column in first:
            mapped = (("messages", column),) + ((("system", system),) if system else ())
            return ColumnMapping(layout, mapped, DEFAULT_TAGS[layout]), False, ()
    near = _near_names(columns) if near_names else {}
    used: list[_NearName] = []

    def named(names: tuple[str, ...], role: str, allowed: set[str] | None = None) -> str | None:
        found = _find_named(columns, names, allowed, near)
        if found is None:
            return None
        column, name = found
        if column.lower() != name:
            used.append(_NearName(column, name, role))
        return column

    prompt_found = _find_named(columns, PROMPT_NAMES, first, near)
    response_found = _find_named(columns, RESPONSE_NAMES, first, near)
    if prompt_found and response_found and prompt_found[0] != response_found[0]:
        (prompt, prompt_name), (response, response_name) = prompt_found, response_found
        for column, name, role in ((prompt, prompt_name, "prompt"), (response, response_name, "response")):
            if column.lower() != name:
                used.append(_NearName(column, name, role))
        mapped = [("prompt", prompt)]
        query = named(("input",), "query") if prompt_name == "instruction" else None
        if query and query != response:
            mapped.append(("query", query))
        if system is None:
            system = named(("system",), "system")
        mapped.append(("response", response))
        if system:
            mapped.append(("system", system))
        history = named(("history",), "history")
        if history:
            mapped.append(("history", history))
        alias = not (prompt_name == "instruction" and response_name == "output")
        return ColumnMapping("alpaca", tuple(mapped)), alias, tuple(used)
    text = named(TEXT_NAMES, "prompt", first)
    if text is None and len(columns) == 1 and isinstance(rows[0], dict) and isinstance(rows[0].get(columns[0]), str):
        text = columns[0]
    if text:
        return ColumnMapping("text", (("prompt", text),)), text != "text", tuple(used)
    return None, False, ()


# --- checking every row -----------------------------------------------------------------------


class _Issues:
    """Per message id: how many rows, the first row numbers, the first row's parameters."""

    def __init__(self) -> None:
        self.found: dict[str, list[Any]] = {}

    def add(self, message: str, number: int, **params: Any) -> None:
        entry = self.found.setdefault(message, [0, [], params])
        entry[0] += 1
        if len(entry[1]) < SHOWN_ROWS:
            entry[1].append(number)

    def rows_text(self, message: str) -> str:
        count, numbers, _ = self.found[message]
        text = ", ".join(str(n) for n in numbers)
        return text + (f" (+{count - len(numbers)})" if count > len(numbers) else "")


class _RowCheck:
    """Checks each row against a mapping; keeps counts and first row numbers only."""

    def __init__(self, mapping: ColumnMapping, unit: str) -> None:
        self.mapping = mapping
        self.unit = unit
        self.columns = dict(mapping.columns)
        self.tags = {**dict(default_tags(mapping.layout)), **dict(mapping.tags)} if mapping.layout in DEFAULT_TAGS else {}
        self.issues = _Issues()
        self.roles_seen: dict[str, None] = {}  # ordered set
        self.roles_unknown: dict[str, None] = {}
        self.required = [self.columns[role] for role, needed in roles_of(mapping.layout) if needed and role in self.columns]

    def add(self, number: int, row: dict) -> None:
        missing = [column for column in self.required if column not in row]
        if missing:
            own, _ = _guess(list(row), [row])
            if own is not None and own.layout != self.mapping.layout:
                self.issues.add("data-mixed-layout", number, own=own.layout)
                return
        if self.mapping.layout == "alpaca":
            self._alpaca(number, row)
        elif self.mapping.layout == "text":
            value = row.get(self.columns.get("prompt", ""))
            if value is not None and not isinstance(value, str):
                self.issues.add("data-value-not-text", number, column=self.columns["prompt"], kind=_kind(value))
            elif _is_empty(value):
                self.issues.add("data-text-empty", number)
        else:
            self._conversation(number, row)

    def _alpaca(self, number: int, row: dict) -> None:
        for role in ("prompt", "query", "response", "system"):
            column = self.columns.get(role)
            value = row.get(column) if column else None
            if value is not None and not isinstance(value, str) and not (isinstance(value, float) and math.isnan(value)):
                self.issues.add("data-value-not-text", number, column=column, kind=_kind(value))
                return
        if _is_empty(row.get(self.columns.get("response", ""))):
            self.issues.add("data-response-empty", number)
        prompt, query = self.columns.get("prompt"), self.columns.get("query")
        if _is_empty(row.get(prompt)) and (query is None or _is_empty(row.get(query))):
            self.issues.add("data-prompt-empty", number)
        history_column = self.columns.get("history")
        history = row.get(history_column) if history_column else None
        if history is not None and not (
            isinstance(history, list) and all(isinstance(p, list) and len(p) == 2 and all(isinstance(t, str) for t in p) for p in history)
        ):
            self.issues.add("data-history-bad", number, column=history_column)

    def _conversation(self, number: int, row: dict) -> None:
        column = self.columns.get("messages", "")
        turns = row.get(column)
        if _is_empty(turns):
            self.issues.add("data-conversation-empty", number)
            return
        if not isinstance(turns, list):
            self.issues.add("data-messages-not-list", number, column=column, kind=_kind(turns))
            return
        role_tag, content_tag = self.tags.get("role_tag", ""), self.tags.get("content_tag", "")
        roles = []
        for index, turn in enumerate(turns, start=1):
            if not isinstance(turn, dict) or role_tag not in turn or content_tag not in turn:
                keys = _names(turn.keys(), 6) if isinstance(turn, dict) else _kind(turn)
                self.issues.add("data-turn-bad", number, turn=index, keys=keys, role_tag=role_tag, content_tag=content_tag, column=column)
                return
            if not isinstance(turn[content_tag], str):
                self.issues.add("data-value-not-text", number, column=f"{column}[{index}].{content_tag}", kind=_kind(turn[content_tag]))
                return
            role = turn[role_tag]
            roles.append(role)
            if len(self.roles_seen) < MAX_ROLES:
                self.roles_seen.setdefault(str(role), None)
        user = {self.tags.get("user_tag"), self.tags.get("observation_tag")} - {None}
        assistant = {self.tags.get("assistant_tag"), self.tags.get("function_tag")} - {None}
        system = self.tags.get("system_tag")
        unknown = [role for role in roles if role not in user | assistant | ({system} if system else set())]
        if unknown:
            for role in unknown:
                if len(self.roles_unknown) < MAX_ROLES:
                    self.roles_unknown.setdefault(str(role), None)
            self.issues.add("data-roles-unknown", number)
            return
        # LLaMA-Factory: one system turn first at most, then user / assistant in turn, and the
        # last turn an assistant's; any other row is skipped with a warning in the log.
        start = 1 if system and roles and roles[0] == system else 0
        rest = roles[start:]
        if not rest:
            self.issues.add("data-conversation-empty", number)
            return
        for index, role in enumerate(rest):
            expected = user if index % 2 == 0 else assistant
            if role not in expected:
                self.issues.add(
                    "data-turns-not-alternating", number, turn=index + start + 1, role=str(role), expected=" / ".join(sorted(expected))
                )
                return
        if len(rest) % 2:
            self.issues.add("data-ends-without-assistant", number, role=str(rest[-1]))
            return
        if _is_empty(turns[-1][content_tag]):
            self.issues.add("data-response-empty", number)

    def findings(self, shown: str) -> list[Finding]:
        found: list[Finding] = []
        issues = self.issues.found
        unit_rows = lambda message: Message(f"data.where.{self.unit}s", n=self.issues.rows_text(message))
        first = lambda message: _where(self.unit, issues[message][1][0])
        count = lambda message: issues[message][0]
        params = lambda message: issues[message][2]
        layout = self.mapping.layout
        if "data-mixed-layout" in issues:
            found.append(Finding.of(KEY, "data-mixed-layout", file=shown, where=first("data-mixed-layout"), own=params("data-mixed-layout")["own"], layout=layout, count=count("data-mixed-layout")))
        if "data-value-not-text" in issues:
            p = params("data-value-not-text")
            found.append(Finding.of(KEY, "data-value-not-text", file=shown, where=first("data-value-not-text"), column=p["column"], kind=p["kind"], count=count("data-value-not-text")))
        if "data-messages-not-list" in issues:
            p = params("data-messages-not-list")
            found.append(Finding.of(KEY, "data-messages-not-list", file=shown, where=first("data-messages-not-list"), column=p["column"], kind=p["kind"], count=count("data-messages-not-list")))
        if "data-turn-bad" in issues:
            p = params("data-turn-bad")
            found.append(
                Finding.of(
                    KEY, "data-turn-bad", file=shown, where=first("data-turn-bad"), turn=p["turn"], keys=p["keys"],
                    role_tag=p["role_tag"], content_tag=p["content_tag"], column=p["column"], count=count("data-turn-bad"),
                )
            )
        if "data-roles-unknown" in issues:
            found.append(self._roles_finding(shown, first("data-roles-unknown"), count("data-roles-unknown")))
        if "data-turns-not-alternating" in issues:
            p = params("data-turns-not-alternating")
            found.append(
                Finding.of(
                    KEY, "data-turns-not-alternating", file=shown, where=first("data-turns-not-alternating"), turn=p["turn"], role=p["role"],
                    expected=p["expected"], rows=unit_rows("data-turns-not-alternating"), count=count("data-turns-not-alternating"),
                )
            )
        if "data-ends-without-assistant" in issues:
            p = params("data-ends-without-assistant")
            found.append(
                Finding.of(
                    KEY, "data-ends-without-assistant", file=shown, where=first("data-ends-without-assistant"), role=p["role"],
                    rows=unit_rows("data-ends-without-assistant"), count=count("data-ends-without-assistant"),
                )
            )
        if "data-conversation-empty" in issues:
            found.append(Finding.of(KEY, "data-conversation-empty", file=shown, column=self.columns.get("messages", ""), rows=unit_rows("data-conversation-empty"), count=count("data-conversation-empty")))
        if "data-response-empty" in issues:
            column = self.columns.get("response") or self.columns.get("messages", "")
            found.append(Finding.of(KEY, "data-response-empty", file=shown, column=column, rows=unit_rows("data-response-empty"), count=count("data-response-empty")))
        if "data-text-empty" in issues:
            found.append(Finding.of(KEY, "data-text-empty", file=shown, column=self.columns.get("prompt", ""), rows=unit_rows("data-text-empty"), count=count("data-text-empty")))
        if "data-history-bad" in issues:
            found.append(Finding.of(KEY, "data-history-bad", file=shown, where=first("data-history-bad"), column=params("data-history-bad")["column"], count=count("data-history-bad")))
        if "data-prompt-empty" in issues:
            found.append(
                Finding.of(
                    KEY, "data-prompt-empty", severity="warning", file=shown, column=self.columns.get("prompt", ""),
                    rows=unit_rows("data-prompt-empty"), count=count("data-prompt-empty"),
                )
            )
        return found

    def _roles_finding(self, shown: str, where: Message, count: int) -> Finding:
        seen = set(self.roles_seen)
        declared = _names([self.tags[t] for t in ("user_tag", "assistant_tag", "system_tag", "observation_tag", "function_tag") if self.tags.get(t)])
        unknown = _names(self.roles_unknown)
        if seen <= SHAREGPT_ROLES:
            suggestion = {"user_tag": "human", "assistant_tag": "gpt", "system_tag": "system"}
        elif seen <= OPENAI_ROLES | {"tool"}:
            suggestion = {"user_tag": "user", "assistant_tag": "assistant", "system_tag": "system"}
        else:
            return Finding.of(KEY, "data-roles-unknown", message="data-roles-unknown-no-guess", file=shown, where=where, found=_names(seen), unknown=unknown, declared=declared, count=count)
        snippet = json.dumps({"tags": suggestion}, ensure_ascii=False)
        return Finding.of(KEY, "data-roles-unknown", file=shown, where=where, found=_names(seen), unknown=unknown, declared=declared, suggestion=snippet, count=count)


# --- the inspection ---------------------------------------------------------------------------


def _mapping_findings(mapping: ColumnMapping, columns: list[str], shown: str) -> list[Finding]:
    """A mapping that cannot be applied to this file at all."""
    if mapping.layout not in LAYOUTS:
        return [Finding.of(KEY, "data-mapping-layout-unknown", layout=repr(mapping.layout), layouts=", ".join(LAYOUTS))]
    roles = dict(roles_of(mapping.layout))
    given = dict(mapping.columns)
    findings = []
    for role, column in mapping.columns:
        if role not in roles:
            findings.append(Finding.of(KEY, "data-mapping-role-unknown", role=role, layout=mapping.layout, roles=", ".join(roles)))
        elif column and column not in columns:
            close = difflib.get_close_matches(column, columns, n=1, cutoff=0.6)
            if close:
                findings.append(Finding.of(KEY, "data-mapping-column-missing", file=shown, role=role, column=repr(column), columns=_names(columns), suggestion=repr(close[0])))
            else:
                findings.append(
                    Finding.of(KEY, "data-mapping-column-missing", message="data-mapping-column-missing-no-match", file=shown, role=role, column=repr(column), columns=_names(columns))
                )
    for role, needed in roles_of(mapping.layout):
        if needed and not given.get(role):
            findings.append(Finding.of(KEY, "data-mapping-role-missing", role=role, layout=mapping.layout))
    for tag, _ in mapping.tags:
        if tag not in TAG_NAMES:
            findings.append(Finding.of(KEY, "data-mapping-tag-unknown", tag=repr(tag), tags=", ".join(TAG_NAMES)))
    return findings


def _layout_unknown(columns: list[str], shown: str) -> Finding:
    near = []
    for column in columns:
        if column in KNOWN_NAMES or column.lower() in KNOWN_NAMES:
            continue
        close = difflib.get_close_matches(column.lower(), KNOWN_NAMES, n=1, cutoff=0.75)
        if close:
            near.append(f"{column!r} → {close[0]!r}")
    if near:
        return Finding.of(KEY, "data-layout-unknown", message="data-layout-unknown-near", file=shown, columns=_names(columns), suggestions=", ".join(near))
    return Finding.of(KEY, "data-layout-unknown", file=shown, columns=_names(columns))


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
    all_empty = {f.params.get("column") for f in findings if f.rule == "data-column-all-empty" and f.severity == "problem"}
    if alias:
        pairs = ", ".join(f"{role} ← {column!r}" for role, column in mapping.columns)
        findings.append(Finding.of(KEY, "data-layout-guessed", severity="warning", file=shown, layout=mapping.layout, pairs=pairs))
    if check is not None:
        # An all-empty prompt column already says what "neither an instruction nor an input" would.
        findings += [f for f in check.findings(shown) if not (f.rule == "data-prompt-empty" and repr(f.params.get("column")) in all_empty)]
    for role, column in mapping.columns:
        if role in ("prompt", "messages") and 0.5 < shares.get(column, 0) < 1:
            findings.append(Finding.of(KEY, "data-column-mostly-empty", severity="warning", file=shown, column=repr(column), share=f"{shares[column] * 100:.0f}"))
    mapped = {column for _, column in mapping.columns}
    unread = [c for c in column_list if c not in mapped and c not in media and c not in dropped]
    if unread:
        findings.append(Finding.of(KEY, "data-columns-unread", severity="warning", file=shown, columns=_names(unread)))
    return result(findings, mapping)


# Roles whose column, empty in every row, is a finding of its own (a response, a conversation
# and a plain text are checked row by row already).
_ALL_EMPTY_ROLES = ("prompt", "query", "system", "history")


def memory_cap_mib() -> int:
    """The memory a reading process may take beyond what it started with, in MiB (what a
    `data-memory` finding names): the reading process sets READ_MEMORY_MIB to its own cap."""
    return READ_MEMORY_MIB


__all__ = [
    "DEFAULT_MAX_BYTES",
    "FORMATS",
    "LAYOUTS",
    "OPENAI_TAGS",
    "SHAREGPT_TAGS",
    "TAG_NAMES",
    "ColumnMapping",
    "Inspection",
    "dataset_info_entry",
    "default_tags",
    "inspect_dataset",
    "roles_of",
]
