"""A registered dataset against what LLaMA-Factory will make of it at start: its
dataset_info.json read, its file loadable (`file_problem`), the columns and tags its entry
declares present in the first rows (`columns_problem`), its rows counted (`row_count`).

The pre-launch check (backend/config/checks.py) asks here; the layouts themselves are
backend/data/layout.py's. Each answer is cached per file version (modification time and
size): the page runs the checks on every form change, and files can be large. A reason is a
message (`data.file.*`, `file-error.*`, `os-error.*`, `json-error.*`), never English text.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from backend.data.layout import ALPACA_DEFAULTS, COLUMN_SYNONYMS, OPTIONAL_COLUMNS, SHAREGPT_DEFAULTS, TAG_DEFAULTS
from backend.i18n import Message
from backend.i18n.errors import file_error, json_error, os_error

DATASET_INFO = "dataset_info.json"
DATASET_PARSE_MAX_BYTES = 64 * 1024 * 1024  # parse whole .json files up to this; beyond, only their start
JSONL_LINES_CHECKED = 50
ROWS_COUNTED_MAX_BYTES = DATASET_PARSE_MAX_BYTES  # beyond, a dataset's rows are "unknown"


# --- what the pre-launch check asks ------------------------------------------------------------


def read_info(path: Path) -> tuple[Any, str]:
    """(dataset_info.json's content, "") or (None, why it cannot be read)."""
    return _read_json_cached(str(path), *_stamp(path))


def file_problem(path: Path) -> str:
    """Why LLaMA-Factory will not load the data file `path`, or ""."""
    return _data_file_problem(str(path), *_stamp(path))


def columns_problem(path: Path, entry: dict[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """(message id, params) when the first rows of `path` lack a column or tag `entry` needs."""
    return _columns_problem(str(path), *_stamp(path), json.dumps(entry, sort_keys=True, default=str))


def row_count(path: Path) -> int | None:
    """The records of `path` when it is a .json list or a .jsonl file small enough to count."""
    return _row_count(str(path), *_stamp(path))


def _quoted(value: Any) -> str:
    """A name from the file, quoted in a message the way Python writes it: 'output'."""
    return repr(value)


def _stamp(path: Path) -> tuple[int, int]:
    """(modification time, size): the cache key that notices an edited file."""
    try:
        stat = path.stat()
    except OSError:
        return (0, -1)
    return (stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _read_json_cached(path: str, mtime_ns: int, size: int) -> tuple[Any, str]:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle), ""
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        return None, file_error(error)


@lru_cache(maxsize=64)
def _data_file_problem(path: str, mtime_ns: int, size: int) -> str:
    """Why a data file will not load, or "" (cached per file version: files can be large)."""
    if size == 0:
        return Message("data.file.empty")
    suffix = Path(path).suffix.lower()
    try:
        if suffix == ".jsonl":
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    if number > JSONL_LINES_CHECKED:
                        break
                    if line.strip():
                        json.loads(line)
        elif suffix == ".json":
            if size > DATASET_PARSE_MAX_BYTES:
                with open(path, encoding="utf-8") as handle:
                    start = handle.read(4096).lstrip()
                if not start.startswith(("[", "{")):
                    return Message("data.file.not-json-start")
            else:
                return _json_data_file(path, mtime_ns, size)[0]
    except UnicodeDecodeError:
        return Message("file-error.not-utf8")
    except ValueError as error:
        return Message("data.file.invalid-json", error=json_error(error))
    except RecursionError:
        return Message("data.file.invalid-json", error=Message("file-error.too-deep"))
    except OSError as error:
        return os_error(error)
    return ""


@lru_cache(maxsize=64)
def _json_data_file(path: str, mtime_ns: int, size: int) -> tuple[str, int | None]:
    """A .json data file of at most DATASET_PARSE_MAX_BYTES, parsed once per version for both
    the load check and the row count: (why it will not load, or ""; its records when it is a
    list, else None)."""
    try:
        with open(path, encoding="utf-8") as handle:
            records = json.load(handle)
    except UnicodeDecodeError:
        return Message("file-error.not-utf8"), None
    except ValueError as error:
        return Message("data.file.invalid-json", error=json_error(error)), None
    except RecursionError:
        return Message("data.file.invalid-json", error=Message("file-error.too-deep")), None
    except OSError as error:
        return os_error(error), None
    if not isinstance(records, (list, dict)):
        return Message("data.file.single-value"), None
    count = len(records) if isinstance(records, list) else None
    return (Message("data.file.no-records") if count == 0 else ""), count


# --- columns: the first rows against the layout dataset_info.json declares -----------------
# LLaMA-Factory's converter (llamafactory/data/converter.py) indexes each row by the declared
# column names, `example[attr.response]`: a column no row has is `KeyError: 'output'` after the
# model has loaded. Only the start of the file is read, so a huge file costs what a small one does.
COLUMNS_READ_MAX_BYTES = 64 * 1024
COLUMNS_ROWS_CHECKED = 20


def _first_rows(path: str, size: int) -> list[dict[str, Any]] | None:
    """Up to COLUMNS_ROWS_CHECKED records from the first COLUMNS_READ_MAX_BYTES of a .json
    (list of objects) or .jsonl file, or the header of a .csv; None for other kinds (not checked)."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".json", ".jsonl", ".csv"):
        return None
    with open(path, "rb") as handle:
        raw = handle.read(COLUMNS_READ_MAX_BYTES)
    truncated = size > len(raw)
    text = raw.decode("utf-8", errors="ignore")  # a cut multi-byte character at the end
    rows: list[dict[str, Any]] = []
    if suffix == ".csv":
        import csv
        import io

        header = next(csv.reader(io.StringIO(text.split("\n", 1)[0])), [])
        return [{name.strip(): "" for name in header if name.strip()}] if header else []
    if suffix == ".jsonl":
        lines = text.splitlines()
        if truncated and lines:
            lines = lines[:-1]  # the last line may be cut
        for line in lines:
            if len(rows) >= COLUMNS_ROWS_CHECKED:
                break
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):
                continue  # a broken line is _data_file_problem's to report
            if isinstance(row, dict):
                rows.append(row)
        return rows
    decoder = json.JSONDecoder()
    index = len(text) - len(text.lstrip())
    if not text[index:index + 1] == "[":
        return None  # one object (columns of lists) or not JSON: not checked here
    index += 1
    while len(rows) < COLUMNS_ROWS_CHECKED:
        while index < len(text) and text[index] in " \t\r\n,":
            index += 1
        if index >= len(text) or text[index] == "]":
            break
        try:
            row, index = decoder.raw_decode(text, index)
        except (ValueError, RecursionError):
            break  # the item the read bound cut (or one nested too deeply to judge)
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _looks_like_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(turn, dict) for turn in value)


def _keys(rows: list[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(str(key) for key in row))
    return list(seen)


def _names(values: Any) -> str:
    return ", ".join(_quoted(v) for v in values) or "-"


@lru_cache(maxsize=64)
def _columns_problem(path: str, mtime_ns: int, size: int, entry_json: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """(message id, params) when the first rows lack a column the declared layout needs, or None."""
    entry = json.loads(entry_json)
    try:
        rows = _first_rows(path, size)
    except OSError:
        return None
    if not rows:
        return None
    formatting = entry.get("formatting", "alpaca")
    columns = entry.get("columns")
    if columns is not None and not isinstance(columns, dict):
        return None
    have = _keys(rows)
    if formatting == "alpaca":
        if isinstance(columns, dict):
            wanted = {attr: columns.get(attr) for attr in (*ALPACA_DEFAULTS, *OPTIONAL_COLUMNS, "chosen", "rejected")}
        else:
            wanted = {**ALPACA_DEFAULTS}
        if entry.get("ranking"):
            wanted.pop("response", None)  # a pairwise row reads chosen/rejected instead
        else:
            wanted.pop("chosen", None), wanted.pop("rejected", None)
    elif formatting in ("sharegpt", "openai"):
        source = columns if isinstance(columns, dict) else SHAREGPT_DEFAULTS
        wanted = {attr: source.get(attr) for attr in ("messages", *OPTIONAL_COLUMNS)}
        if entry.get("ranking"):
            wanted.update(chosen=source.get("chosen"), rejected=source.get("rejected"))
    else:
        return None
    named: dict[str, str] = {attr: name for attr, name in wanted.items() if isinstance(name, str) and name}
    missing = {attr: name for attr, name in named.items() if name not in have}
    if formatting == "alpaca" and missing:
        talks = [key for key in have if any(_looks_like_conversation(row.get(key)) for row in rows)]
        if talks:
            return "dataset-looks-sharegpt", _sharegpt_params(rows, talks[0], missing, have)
    if missing:
        return _missing_columns(formatting, named, missing, have)
    if formatting in ("sharegpt", "openai"):
        return _missing_tags(entry, rows, named["messages"])
    return None


def _sharegpt_params(rows: list[dict[str, Any]], key: str, missing: dict[str, str], have: list[str]) -> tuple[tuple[str, str], ...]:
    parts = ['"formatting": "sharegpt"']
    if key != SHAREGPT_DEFAULTS["messages"]:
        parts.append(f'"columns": {{"messages": {json.dumps(key)}}}')
    turn_keys = _keys([turn for row in rows for turn in (row.get(key) or []) if isinstance(turn, dict)])
    if "role" in turn_keys and "content" in turn_keys and "from" not in turn_keys:
        parts.append('"tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant", "system_tag": "system"}')
    return (("missing", _names(missing.values())), ("have", _names(have)), ("snippet", ", ".join(parts)))


def _missing_columns(formatting: str, wanted: dict[str, str], missing: dict[str, str], have: list[str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    params = (("missing", _names(missing.values())), ("have", _names(have)), ("formatting", formatting))
    extra = [key for key in have if key not in wanted.values()]
    guesses: dict[str, str] = {}
    for attr in missing:
        if len(missing) == 1 and len(extra) == 1:
            guesses[attr] = extra[0]
        else:
            # The first column that is a synonym of the role (a dict comprehension keyed by
            # `attr` kept the last one: ruff B035).
            found = next((key for key in extra if key.lower() in COLUMN_SYNONYMS.get(attr, ())), None)
            if found is not None:
                guesses[attr] = found
    if set(guesses) != set(missing) or len(set(guesses.values())) != len(guesses):
        return "dataset-columns-missing-no-guess", params
    # The mapping must list every column: an entry with `columns` drops the names it leaves out.
    mapping = {**wanted, **guesses}
    snippet = '"columns": ' + json.dumps(mapping, ensure_ascii=False)
    renames = ", ".join(f"{_quoted(new)} -> {_quoted(wanted[attr])}" for attr, new in guesses.items())
    return "dataset-columns-missing", (*params, ("snippet", snippet), ("renames", renames))


def _missing_tags(entry: dict[str, Any], rows: list[dict[str, Any]], messages: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    given = entry.get("tags")
    tags: dict[str, Any] = given if isinstance(given, dict) else {}
    turns = [turn for row in rows if isinstance(row.get(messages), list) for turn in row[messages] if isinstance(turn, dict)]
    if not turns:
        return None
    have = _keys(turns)
    wanted = [tags.get(tag, default) for tag, default in TAG_DEFAULTS.items()]
    missing = [name for name in wanted if isinstance(name, str) and name not in have]
    if not missing:
        return None
    snippet = '"tags": {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant", "system_tag": "system"}'
    return "dataset-message-keys-missing", (("missing", _names(missing)), ("have", _names(have)), ("messages", messages), ("snippet", snippet))


@lru_cache(maxsize=64)
def _row_count(path: str, mtime_ns: int, size: int) -> int | None:
    """Records in a .json list or the non-blank lines of a .jsonl file; None when unknown
    (another kind, too large to count on every form change, unreadable)."""
    if size > ROWS_COUNTED_MAX_BYTES or size < 0:
        return None
    suffix = Path(path).suffix.lower()
    try:
        if suffix == ".jsonl":
            with open(path, "rb") as handle:
                return sum(1 for line in handle if line.strip())
        if suffix == ".json":
            return _json_data_file(path, mtime_ns, size)[1]
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return None
