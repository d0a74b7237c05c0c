"""The layouts of a dataset file as LLaMA-Factory reads them (llamafactory/data/parser.py
DatasetAttr, converter.py): which roles each layout maps to columns, the tags of a
conversation, the column names LLaMA-Factory takes when an entry names none, and the names
people use instead. The Data tab's reading (backend/data/dataset_file.py) and the pre-launch
check of a registered dataset (backend/data/entry_check.py) both ask here.
"""

from __future__ import annotations

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
