"""The layouts of a dataset file as LLaMA-Factory reads them (llamafactory/data/parser.py
DatasetAttr, converter.py): which roles each layout maps to columns, the tags of a
conversation, the column names LLaMA-Factory takes when an entry names none, and the names
people use instead. The Data tab's reading (backend/data/dataset_file.py) and the pre-launch
check of a registered dataset (backend/data/entry_check.py) both ask here.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

LAYOUTS = ("alpaca", "sharegpt", "openai", "text")

# role -> required, per layout (the page's remap dropdowns; LLaMA-Factory's DatasetAttr names).
ROLES: dict[str, tuple[tuple[str, bool], ...]] = {
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
DEFAULT_TAGS = {"sharegpt": SHAREGPT_TAGS, "openai": OPENAI_TAGS}
SHAREGPT_ROLES = {"human", "gpt", "system", "observation", "function_call"}
OPENAI_ROLES = {"user", "assistant", "system"}

# Column names a guess accepts, best first. Exact LLaMA-Factory names are sure; the rest are
# aliases, and a guess that uses one is flagged for the user to confirm.
PROMPT_NAMES = ("instruction", "prompt", "question", "query", "input")
RESPONSE_NAMES = ("output", "response", "completion", "answer")
TEXT_NAMES = ("text", "content", "document")
KNOWN_NAMES = (*PROMPT_NAMES, *RESPONSE_NAMES, "text", "conversations", "messages", "system", "history")


# LLaMA-Factory's defaults (DatasetAttr in llamafactory/data/parser.py). An entry with a
# `columns` mapping takes ONLY the names it lists: every other one becomes None (not its default).
ALPACA_DEFAULTS = {"prompt": "instruction", "query": "input", "response": "output"}
SHAREGPT_DEFAULTS = {"messages": "conversations"}
TAG_DEFAULTS = dict(SHAREGPT_TAGS[:2])  # role_tag "from", content_tag "value"
OPTIONAL_COLUMNS = ("history", "system", "tools", "images", "videos", "audios", "kto_tag")
# Columns people often use instead of LLaMA-Factory's names: a missing column the pre-launch
# check can name a rename for.
COLUMN_SYNONYMS = {
    "prompt": ("question", "prompt", "instruction", "query", "text"),
    "query": ("input", "context"),
    "response": ("answer", "response", "completion", "output", "target", "label"),
}


@dataclass(frozen=True)
class ColumnMapping:
    layout: str
    columns: tuple[tuple[str, str], ...]  # LLaMA-Factory role -> the file's column
    tags: tuple[tuple[str, str], ...] = ()  # sharegpt/openai tags (role_tag, user_tag...)


def roles_of(layout: str) -> tuple[tuple[str, bool], ...]:
    """The roles `layout` maps to columns, each with whether it is required."""
    return ROLES.get(layout, ())


def default_tags(layout: str) -> tuple[tuple[str, str], ...]:
    return DEFAULT_TAGS.get(layout, ())


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
MAX_COLUMNS = 1000  # columns tracked of rows whose keys all differ; a CSV or Parquet header holds at most this
MAX_ROLES = 50  # distinct role names remembered
# A column name within a near miss of a role's name is read as that role ("instrution").
NEAR_NAME_CUTOFF = 0.8


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
        alpaca: list[tuple[str, str]] = [("prompt", prompt)]
        query = named(("input",), "query") if prompt_name == "instruction" else None
        if query and query != response:
            alpaca.append(("query", query))
        if system is None:
            system = named(("system",), "system")
        alpaca.append(("response", response))
        if system:
            alpaca.append(("system", system))
        history = named(("history",), "history")
        if history:
            alpaca.append(("history", history))
        alias = not (prompt_name == "instruction" and response_name == "output")
        return ColumnMapping("alpaca", tuple(alpaca)), alias, tuple(used)
    text = named(TEXT_NAMES, "prompt", first)
    if text is None and len(columns) == 1 and isinstance(rows[0], dict) and isinstance(rows[0].get(columns[0]), str):
        text = columns[0]
    if text:
        return ColumnMapping("text", (("prompt", text),)), text != "text", tuple(used)
    return None, False, ()
