"""What a dataset file holds, before RocBoard registers it for LLaMA-Factory.

A user uploads a file or names one on the server; this module reads it (bounded in time and
memory: JSONL line by line, CSV in pandas chunks, Parquet in pyarrow batches, a .json list
whole but capped), guesses its layout (alpaca, sharegpt, openai, plain text), and checks
every row against the column mapping: each problem a `Finding` (key "data_file", message ids
`data-*`) that names the file, the line or row, and the fix. Only the preview rows are kept.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from backend.findings import Finding
from backend.i18n import Message

LAYOUTS = ("alpaca", "sharegpt", "openai", "text")
# The extensions LLaMA-Factory reads (extras/constants.py FILEEXT2TYPE) that RocBoard checks.
FORMATS = {".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
KEY = "data_file"  # the finding key of every problem in a data file

DEFAULT_MAX_BYTES = 4 * 2**30  # a file over this is not read at all (minutes of checking)
JSON_MAX_BYTES = DEFAULT_MAX_BYTES  # a .json list is parsed element by element (_json), like JSONL
JSON_CHUNK_CHARS = 1 << 20  # characters read at a time from a .json file
LINE_MAX_BYTES = 16 * 2**20  # one JSONL line
PREVIEW_ROWS = 20
CELL_CHARS = 300
SHOWN_ROWS = 5  # row numbers a message names before "and N more"
MAX_COLUMNS = 1000  # columns tracked of rows whose keys all differ
MAX_ROLES = 50  # distinct role names remembered
CSV_CHUNK_ROWS = 2000
PARQUET_BATCH_ROWS = 1000
# Columns of images, videos or audio: LLaMA-Factory trains them with a multimodal model only.
MEDIA_COLUMNS = ("images", "videos", "audios", "image", "video", "audio")

# role -> required, per layout (the page's remap dropdowns; LLaMA-Factory's DatasetAttr names).
_ROLES: dict[str, tuple[tuple[str, bool], ...]] = {
    "alpaca": (("prompt", True), ("query", False), ("response", True), ("system", False), ("history", False)),
    "sharegpt": (("messages", True), ("system", False)),
    "openai": (("messages", True), ("system", False)),
    "text": (("prompt", True),),
}
TAG_NAMES = ("role_tag", "content_tag", "user_tag", "assistant_tag", "system_tag", "observation_tag", "function_tag")
SHAREGPT_TAGS = (
    ("role_tag", "from"),
    ("content_tag", "value"),
    ("user_tag", "human"),
    ("assistant_tag", "gpt"),
    ("system_tag", "system"),
    ("observation_tag", "observation"),
    ("function_tag", "function_call"),
)
OPENAI_TAGS = (
    ("role_tag", "role"),
    ("content_tag", "content"),
    ("user_tag", "user"),
    ("assistant_tag", "assistant"),
    ("system_tag", "system"),
)
_DEFAULT_TAGS = {"sharegpt": SHAREGPT_TAGS, "openai": OPENAI_TAGS}
_SHAREGPT_ROLES = {"human", "gpt", "system", "observation", "function_call"}
_OPENAI_ROLES = {"user", "assistant", "system"}

# Column names a guess accepts, best first. Exact LLaMA-Factory names are sure; the rest are
# aliases, and a guess that uses one is flagged for the user to confirm.
_PROMPT_NAMES = ("instruction", "prompt", "question", "query", "input")
_RESPONSE_NAMES = ("output", "response", "completion", "answer")
_TEXT_NAMES = ("text", "content", "document")
_KNOWN_NAMES = (*_PROMPT_NAMES, *_RESPONSE_NAMES, "text", "conversations", "messages", "system", "history")


@dataclass(frozen=True)
class ColumnMapping:
    layout: str
    columns: tuple[tuple[str, str], ...]  # LLaMA-Factory role -> the file's column
    tags: tuple[tuple[str, str], ...] = ()  # sharegpt/openai tags (role_tag, user_tag...)


def roles_of(layout: str) -> tuple[tuple[str, bool], ...]:
    """The roles `layout` maps to columns, each with whether it is required."""
    return _ROLES.get(layout, ())


def default_tags(layout: str) -> tuple[tuple[str, str], ...]:
    return _DEFAULT_TAGS.get(layout, ())


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


def dataset_info_entry(mapping: ColumnMapping, file_name: str) -> dict[str, Any]:
    """The LLaMA-Factory dataset_info.json entry for a file read with `mapping`."""
    columns = {role: column for role, column in mapping.columns if column}
    if mapping.layout in ("alpaca", "text"):
        return {"file_name": file_name, "formatting": "alpaca", "columns": columns}
    # openai-style files are read with the sharegpt converter and role/content tags: 0.9.5's
    # own "openai" converter appends "detailed thinking off" to every system prompt.
    # Every tag written out: a "tags" mapping that leaves one out sets it to None in
    # LLaMA-Factory (DatasetAttr.join), not to its default.
    tags = {**dict(default_tags(mapping.layout)), **dict(mapping.tags)}
    return {"file_name": file_name, "formatting": "sharegpt", "columns": columns, "tags": tags}


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


def _utf8_error(path: Path) -> tuple[int, int, str] | None:
    """(byte offset, line, the byte) of the first byte that is not UTF-8, streaming."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    lines = 1
    with open(path, "rb") as handle:
        while True:
            block = handle.read(1 << 20)
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(block, final=not block)
            except UnicodeDecodeError as error:
                data = error.object
                return offset - pending + error.start, lines + data[: error.start].count(b"\n"), f"0x{data[error.start]:02x}"
            if not block:
                return None
            lines += block.count(b"\n")
            offset += len(block)


# --- reading rows -----------------------------------------------------------------------------


class _Reader:
    """Rows of one file: (number, row) where the number counts lines (JSONL) or rows."""

    def __init__(self, path: Path, file_format: str, shown: str) -> None:
        self.path = path
        self.file_format = file_format
        self.shown = shown
        self.unit = "line" if file_format == "jsonl" else "row"
        self._utf8_checked = False

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

    def _jsonl(self) -> Iterator[tuple[int, Any]]:
        offset = 0
        with open(self.path, "rb") as handle:
            number = 0
            while True:
                raw = handle.readline(LINE_MAX_BYTES + 1)
                if not raw:
                    return
                number += 1
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
                except ValueError as error:
                    detail = getattr(error, "msg", str(error))
                    column = getattr(error, "colno", 0)
                    raise _Stop(Finding.of(KEY, "data-json-invalid", file=self.shown, line=number, column=column, error=detail)) from None
                yield number, row

    def _json(self) -> Iterator[tuple[int, Any]]:
        """The elements of a top-level JSON list, one at a time: the file is read in chunks of
        JSON_CHUNK_CHARS and each element decoded as soon as it is whole, so memory holds one
        element (at most LINE_MAX_BYTES), never the file. A file of JSON lines named .json is
        read as JSONL (Hugging Face's json loader reads those too)."""
        size = self.path.stat().st_size
        if size > JSON_MAX_BYTES:
            raise _Stop(Finding.of(KEY, "data-json-too-big", file=self.shown, size=_mb(size), limit=_mb(JSON_MAX_BYTES)))
        if not self._utf8_checked:
            found = _utf8_error(self.path)
            if found is not None:
                raise self._not_utf8(*found)
            self._utf8_checked = True
        stream = _JsonStream(self.path, self.shown)
        first = stream.next_char()
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
            row = stream.value()
            number += 1
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

        if not self._utf8_checked:
            bad = _utf8_error(self.path)
            if bad:
                raise self._not_utf8(*bad)
            self._utf8_checked = True
        number = 0
        try:
            # Every cell as text, nothing turned into NaN: emptiness is judged on the text.
            chunks = pd.read_csv(self.path, chunksize=CSV_CHUNK_ROWS, dtype=str, keep_default_na=False, na_filter=False, encoding="utf-8")
            for chunk in chunks:
                for row in chunk.to_dict("records"):
                    number += 1
                    yield number, row
        except pd.errors.EmptyDataError:
            return
        except pd.errors.ParserError as error:
            text = str(error).strip()
            found = re.search(r"in line (\d+)", text)
            line = int(found.group(1)) if found else number + 2
            raise _Stop(Finding.of(KEY, "data-csv-malformed", file=self.shown, line=line, error=text.splitlines()[-1] if text else "")) from None

    def _parquet(self) -> Iterator[tuple[int, Any]]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError, ValueError) as error:
            raise _Stop(Finding.of(KEY, "data-parquet-bad", file=self.shown, error=str(error)[:300])) from None
        number = 0
        try:
            for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
                for row in batch.to_pylist():
                    number += 1
                    yield number, row
        except (pa.ArrowException, OSError, ValueError) as error:
            raise _Stop(Finding.of(KEY, "data-parquet-bad", file=self.shown, error=str(error)[:300])) from None
        finally:
            parquet.close()


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

    def _more(self) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(JSON_CHUNK_CHARS)
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
        """The next JSON value, decoded whole."""
        self.next_char()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buffer, self.position)
            except json.JSONDecodeError as error:
                # An error at the end of what is read may only mean the value goes on.
                if len(self.buffer) - self.position > LINE_MAX_BYTES:
                    line = self.line + self.buffer.count("\n", 0, self.position)
                    raise _Stop(Finding.of(KEY, "data-line-too-long", file=self.shown, line=line, limit=_mb(LINE_MAX_BYTES))) from None
                if self._more():
                    continue
                self.fail(error.msg, error.pos)
            self.position = end
            return value

    def expect_end(self) -> None:
        if self.next_char():
            self.fail("Extra data")

    def fail(self, message: str, at: int | None = None) -> None:
        at = self.position if at is None else at
        line = self.line + self.buffer.count("\n", 0, at)
        column = at - (self.buffer.rfind("\n", 0, at) + 1) + 1
        raise _Stop(Finding.of(KEY, "data-json-invalid", file=self.shown, line=line, column=column, error=message))


# --- guessing the layout ----------------------------------------------------------------------


def _find(columns: list[str], names: tuple[str, ...], allowed: set[str] | None = None) -> str | None:
    """The first of `names` among `columns` (exact first, then ignoring case)."""
    pool = [c for c in columns if allowed is None or c in allowed]
    for name in names:
        if name in pool:
            return name
    lowered = {c.lower(): c for c in pool}
    for name in names:
        if name in lowered:
            return lowered[name]
    return None


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


def _guess(columns: list[str], rows: list[dict]) -> tuple[ColumnMapping | None, bool]:
    """(mapping, whether it rests on an alias) from the first rows; the first row's keys
    decide the layout's required columns (so a file that mixes layouts reads as its first)."""
    if not rows:
        return None, False
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
            if roles and roles <= _OPENAI_ROLES and not roles & {"human", "gpt"}:
                tags.update(user_tag="user", assistant_tag="assistant")
        elif {"role", "content"} <= keys:
            layout, tags = "openai", dict(OPENAI_TAGS)
            if roles and roles <= _SHAREGPT_ROLES and not roles & {"user", "assistant"}:
                tags.update(user_tag="human", assistant_tag="gpt")
        else:
            continue
        alias = column not in ("conversations", "messages") or tags != dict(_DEFAULT_TAGS[layout])
        mapped = (("messages", column),) + ((("system", system),) if system else ())
        return ColumnMapping(layout, mapped, tuple(tags.items())), alias
    # A conversations/messages column that holds no list (text in a CSV): read it as one, so
    # the rows' check says what each row holds instead of "layout not found".
    for column, layout in (("conversations", "sharegpt"), ("messages", "openai")):
        if column in first:
            mapped = (("messages", column),) + ((("system", system),) if system else ())
            return ColumnMapping(layout, mapped, _DEFAULT_TAGS[layout]), False
    prompt = _find(columns, _PROMPT_NAMES, first)
    response = _find(columns, _RESPONSE_NAMES, first)
    if prompt and response and prompt != response:
        mapped = [("prompt", prompt)]
        query = _find(columns, ("input",)) if prompt.lower() == "instruction" else None
        if query and query != response:
            mapped.append(("query", query))
        mapped.append(("response", response))
        if system:
            mapped.append(("system", system))
        history = _find(columns, ("history",))
        if history:
            mapped.append(("history", history))
        alias = not (prompt == "instruction" and response == "output")
        return ColumnMapping("alpaca", tuple(mapped)), alias
    text = _find(columns, _TEXT_NAMES, first)
    if text is None and len(columns) == 1 and isinstance(rows[0], dict) and isinstance(rows[0].get(columns[0]), str):
        text = columns[0]
    if text:
        return ColumnMapping("text", (("prompt", text),)), text != "text"
    return None, False


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
        self.tags = {**dict(default_tags(mapping.layout)), **dict(mapping.tags)} if mapping.layout in _DEFAULT_TAGS else {}
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
        if seen <= _SHAREGPT_ROLES:
            suggestion = {"user_tag": "human", "assistant_tag": "gpt", "system_tag": "system"}
        elif seen <= _OPENAI_ROLES | {"tool"}:
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
        if column in _KNOWN_NAMES or column.lower() in _KNOWN_NAMES:
            continue
        close = difflib.get_close_matches(column.lower(), _KNOWN_NAMES, n=1, cutoff=0.75)
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
        return _refused(path, file_format, mapping, Finding.of(KEY, "data-unreadable", file=shown_name, error=error.strerror or str(error)))
    if not stat.S_ISREG(info.st_mode):
        return _refused(path, file_format, mapping, Finding.of(KEY, "data-unreadable", file=shown_name, error="not a regular file"))
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
        return _inspect(path, file_format, shown_name, mapping)
    except OSError as error:
        return _refused(path, file_format, mapping, Finding.of(KEY, "data-unreadable", file=shown_name, error=error.strerror or str(error)))


def _inspect(path: Path, file_format: str, shown: str, given: ColumnMapping | None) -> Inspection:
    reader = _Reader(path, file_format, shown)
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
    first_columns = list(dict.fromkeys(str(k) for row in first_rows for k in row))
    guessed = False
    mapping = given
    alias = False
    if mapping is None:
        mapping, alias = _guess(first_columns, first_rows)
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
    column_list = tuple(columns)
    empty_share = tuple((c, round(1 - filled.get(c, 0) / rows, 4) if rows else 1.0) for c in column_list)
    preview = tuple(tuple(cells.get(c, "") for c in column_list) for cells in preview_cells)

    def result(found: list[Finding]) -> Inspection:
        return Inspection(path, reader.file_format, rows, column_list, empty_share, preview, mapping, tuple(found), guessed)

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
    if alias:
        pairs = ", ".join(f"{role} ← {column!r}" for role, column in mapping.columns)
        findings.append(Finding.of(KEY, "data-layout-guessed", severity="warning", file=shown, layout=mapping.layout, pairs=pairs))
    if check is not None:
        findings += check.findings(shown)
    shares = dict(empty_share)
    for role, column in mapping.columns:
        if role in ("prompt", "messages") and 0.5 < shares.get(column, 0) < 1:
            findings.append(Finding.of(KEY, "data-column-mostly-empty", severity="warning", file=shown, column=repr(column), share=f"{shares[column] * 100:.0f}"))
    mapped = {column for _, column in mapping.columns}
    unread = [c for c in column_list if c not in mapped and c not in media]
    if unread:
        findings.append(Finding.of(KEY, "data-columns-unread", severity="warning", file=shown, columns=_names(unread)))
    return result(findings)


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
