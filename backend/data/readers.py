"""Reading a dataset file in bounded time and memory: JSONL line by line, CSV in pandas chunks of
about CSV_CHUNK_BYTES, Parquet in pyarrow batches sized from its metadata, a .json list element
by element; what a line, a row, its nesting, the rows and a Parquet file's footer allow is
checked before it is decoded. A file that cannot be read further stops with a `_Stop` holding
the finding that says why. backend/data/dataset_file.py drives the readers; their rows go to
the row checks (backend/data/rows.py).
"""


from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.data.layout import (
    MAX_COLUMNS,
)
from backend.findings import Finding
from backend.i18n import Message
from backend.i18n.errors import json_problem

KEY = "data_file"  # the finding key of every problem in a data file

DEFAULT_MAX_BYTES = 4 * 2**30  # a file over this is not read at all (minutes of checking)
JSON_MAX_BYTES = DEFAULT_MAX_BYTES  # a .json list is parsed element by element (_json), like JSONL
JSON_CHUNK_CHARS = 1 << 20  # characters read at a time from a .json file
LINE_MAX_BYTES = 16 * 2**20  # one JSONL line, one CSV line, one .json element, one decoded Parquet row
MAX_ROWS = 5_000_000  # rows checked in any file (a Parquet file's count is read before any row)
MAX_DEPTH = 100  # lists and objects nested in one row (a training row needs 3 or 4)
CSV_CHUNK_ROWS = 2000
CSV_CHUNK_BYTES = 16 * 2**20  # a chunk holds fewer rows when lines are long: about this many bytes
PARQUET_BATCH_ROWS = 1000
PARQUET_BATCH_BYTES = 16 * 2**20  # decoded bytes turned into Python rows at a time
PARQUET_VALUE_COST = 32  # what one decoded value costs in Python beyond its bytes (counted, not measured)
PARQUET_DICTIONARY_READ_MAX = 64 * 2**20  # a column chunk's dictionary is read ahead only up to this


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
        total: Any = np.full(count, PARQUET_VALUE_COST, dtype=np.int64)
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
                for c, name in zip(ahead, names, strict=True):
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
            space = _JSON_SPACE.match(self.buffer, self.position)  # `\s*` matches everywhere
            self.position = space.end() if space else self.position
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
