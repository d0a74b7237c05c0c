"""Checking every row of a dataset file against its column mapping: missing and empty columns,
turns without a role or content, media columns, each problem a finding (key "data_file",
message ids `data-*`) naming the file, the rows and the fix. The mapping is the user's or the
guess of backend/data/layout.py.
"""


from __future__ import annotations

import difflib
import json
import math
from typing import Any

from backend.data.layout import (
    DEFAULT_TAGS,
    KNOWN_NAMES,
    LAYOUTS,
    MAX_ROLES,
    OPENAI_ROLES,
    SHAREGPT_ROLES,
    TAG_NAMES,
    ColumnMapping,
    _guess,
    default_tags,
    roles_of,
)
from backend.data.readers import KEY, _kind, _names, _where
from backend.findings import Finding
from backend.i18n import Message

CELL_CHARS = 300
SHOWN_ROWS = 5  # row numbers a message names before "and N more"
# Columns of images, videos or audio: LLaMA-Factory trains them with a multimodal model only.
MEDIA_COLUMNS = ("images", "videos", "audios", "image", "video", "audio")


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


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = ""
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"


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
        user = {tag for tag in (self.tags.get("user_tag"), self.tags.get("observation_tag")) if tag is not None}
        assistant = {tag for tag in (self.tags.get("assistant_tag"), self.tags.get("function_tag")) if tag is not None}
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

        def unit_rows(message: str) -> Message:
            return Message(f"data.where.{self.unit}s", n=self.issues.rows_text(message))

        def first(message: str) -> Message:
            return _where(self.unit, issues[message][1][0])

        def count(message: str) -> Any:
            return issues[message][0]

        def params(message: str) -> Any:
            return issues[message][2]

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
            empty_rows = unit_rows("data-conversation-empty")
            found.append(Finding.of(KEY, "data-conversation-empty", file=shown, column=self.columns.get("messages", ""), rows=empty_rows, count=count("data-conversation-empty")))
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


# Roles whose column, empty in every row, is a finding of its own (a response, a conversation
# and a plain text are checked row by row already).
_ALL_EMPTY_ROLES = ("prompt", "query", "system", "history")
