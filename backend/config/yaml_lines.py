"""The line-keeping YAML patcher: a finding's patch (keys to set; None removes a key) written
into the YAML text itself, line by line, so that the file's comments, blank lines and order
survive; `patch_yaml_text` answers None where it cannot vouch for the result (the caller,
backend/config/yaml_import.py's `fix_yaml_text`, then rewrites the file whole).

`apply_patch` is the one rule for a patch, on the mapping: the text's lines follow it, and
the patched text must read back (as llamafactory-cli reads it) to exactly that mapping.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from backend.config.yaml_reader import _LlamaFactoryLoader, load_yaml_text
from backend.findings import Finding

_LINE_BREAKS_OTHER_THAN_LF = re.compile("\r(?!\n)|[\x85\u2028\u2029\ufeff]")
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")
_VALUE_WIDTH = 1 << 20  # a value is written on its key's line, however long


def apply_patch(args: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    removed = [key for key, value in patch.items() if value is None and key in args]
    new = {key: value for key, value in patch.items() if value is not None and key not in args}
    result: dict[str, Any] = {}
    for key, value in args.items():
        if removed and key == removed[0]:
            # What replaces a removed key (a renamed typo) takes its place in the file.
            result.update(new)
            new = {}
        if key not in patch:
            result[key] = value
        elif patch[key] is not None:
            result[key] = patch[key]
    result.update(new)  # nothing was removed: new keys go last
    return result


def patch_yaml_text(text: str, args: dict[str, Any], findings: list[Finding]) -> str | None:
    """`text` (whose mapping is `args`) with the findings' patches applied to its lines, as
    `apply_patch` applies them, in order, to the mapping; None when the text is not a plain
    block mapping of one key per column-0 line, or when the result would not parse to exactly
    that mapping (the caller then rewrites the file whole)."""
    document = _Document.read(text)
    if document is None or document.keys() != list(args):
        return None
    document.values = dict(args)
    for finding in findings:
        if finding.patch and not document.apply(finding.patch):
            return None
    patched = document.text()
    expected = dict(args)
    for finding in findings:
        expected = apply_patch(expected, finding.patch)
    again, problems = load_yaml_text(patched, max_bytes=max(len(patched.encode("utf-8", errors="replace")), 1) * 2)
    if again is None or problems or typed_text(again) != typed_text(expected):
        return None
    return patched


def typed_text(value: Any) -> str:
    """A mapping as text that tells 1 from 1.0 from true, and one order of keys from another."""
    return json.dumps(value, default=repr, ensure_ascii=False)


def _render_entry(key: str, value: Any, newline: str) -> str:
    """`key: value` as YAML writes it (quoted where needed), one or more lines."""
    text = yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=True, default_flow_style=False, width=_VALUE_WIDTH)
    return text.replace("\n", newline)


def _render_key(key: str) -> str | None:
    """The key as YAML writes it before `: `; None when it is not one line."""
    text = yaml.safe_dump({key: 0}, allow_unicode=True, default_flow_style=False, width=_VALUE_WIDTH)
    return text[: -len(": 0\n")] if text.endswith(": 0\n") and text.count("\n") == 1 else None


def _render_value(value: Any) -> str | None:
    """The value as it is written after `key: ` on one line; None when it needs more lines."""
    text = yaml.safe_dump({"k": value}, sort_keys=False, allow_unicode=True, default_flow_style=False, width=_VALUE_WIDTH)
    if text.count("\n") != 1 or not text.startswith("k: "):
        return None
    return text[3:-1]


@dataclass
class _Segment:
    """Lines of the file: one top-level entry (its key line and the lines of its value) or,
    with key None, the blank and comment lines around them."""

    lines: list[str]
    key: str | None = None
    value_span: tuple[int, int] | None = None  # where the value sits in lines[0], when on that line alone
    key_end: int = 0  # where the key's text ends in lines[0]


@dataclass
class _Document:
    segments: list[_Segment]
    newline: str
    values: dict[str, Any] = field(default_factory=dict)  # the mapping the segments hold

    @classmethod
    def read(cls, text: str) -> _Document | None:
        if not text.strip() or _LINE_BREAKS_OTHER_THAN_LF.search(text):
            return None
        loader = _LlamaFactoryLoader(text)
        try:
            root = loader.get_single_node()
        except (yaml.YAMLError, RecursionError, ValueError, TypeError, KeyError):
            return None
        finally:
            loader.dispose()
        if not isinstance(root, yaml.MappingNode) or root.flow_style:
            return None
        lines = _LINE.findall(text)
        starts, offset = [], 0
        for line in lines:
            starts.append(offset)
            offset += len(line)
        entries: list[tuple[int, str, tuple[int, int] | None, int]] = []
        for key_node, value_node in root.value:
            mark = key_node.start_mark
            if not (
                isinstance(key_node, yaml.ScalarNode)
                and key_node.tag == "tag:yaml.org,2002:str"
                and mark.column == 0
                and key_node.end_mark.line == mark.line
            ):
                return None
            if entries and mark.line <= entries[-1][0]:
                return None
            span = None
            start, end = value_node.start_mark, value_node.end_mark
            if start.line == mark.line and end.line == mark.line and end.index > start.index and start.index > key_node.end_mark.index:
                span = (start.index - starts[mark.line], end.index - starts[mark.line])
            entries.append((mark.line, str(key_node.value), span, key_node.end_mark.index - starts[mark.line]))
        if not entries or len({entry[1] for entry in entries}) != len(entries):
            return None
        # Before the first key: comments, blank lines, a `---` or a directive.
        head = lines[: entries[0][0]]
        if any(not (_gap(line) or line.startswith(("---", "%"))) for line in head):
            return None
        segments = [_Segment(head)] if head else []
        for index, (line_no, key, span, key_end) in enumerate(entries):
            end = entries[index + 1][0] if index + 1 < len(entries) else len(lines)
            body = lines[line_no:end]
            cut = len(body)
            while cut > 1 and _gap(body[cut - 1]):
                cut -= 1
            # What follows a key line is its value: indented lines, list items, comments.
            if any(not (_gap(line) or line[:1] in (" ", "\t", "-")) or line.startswith(("---", "...")) for line in body[1:cut]):
                return None
            if any(not _gap(line) for line in body[cut:]):
                return None
            segments.append(_Segment(body[:cut], key, span if cut == 1 else None, key_end))
            if body[cut:]:
                segments.append(_Segment(body[cut:]))
        newline = "\r\n" if lines[0].endswith("\r\n") else "\n"
        return cls(segments, newline)

    def keys(self) -> list[str]:
        return [segment.key for segment in self.segments if segment.key is not None]

    def text(self) -> str:
        return "".join(line for segment in self.segments for line in segment.lines)

    def apply(self, patch: dict[str, Any]) -> bool:
        """`patch` applied as `_apply_patch` applies it to the mapping: values replaced on
        their line, removed keys' lines dropped, new keys in the first removed key's place
        (else at the end). False when a value cannot be written."""
        present = set(self.keys())
        removed = [key for key, value in patch.items() if value is None and key in present]
        new = {key: value for key, value in patch.items() if value is not None and key not in present}
        out: list[_Segment] = []
        for segment in self.segments:
            key = segment.key
            if key is not None and removed and key == removed[0]:
                out += self._in_place_of(segment, new)
                new = {}
            if key is None or key not in patch:
                out.append(segment)
            elif patch[key] is not None:
                out.append(self._replaced(segment, patch[key]))
        if new:
            if out and out[-1].lines and not out[-1].lines[-1].endswith("\n"):
                last = out[-1]
                out[-1] = replace(last, lines=[*last.lines[:-1], last.lines[-1] + self.newline])
            out += [self._entry(k, v) for k, v in new.items()]
        self.segments = out
        self.values = apply_patch(self.values, patch)
        return True

    def _in_place_of(self, removed: _Segment, new: dict[str, Any]) -> list[_Segment]:
        """The new keys that take a removed key's place. A renamed key (a typo's fix: the
        same value under the right name) keeps its line: its value as written, its comment."""
        assert removed.key is not None
        old = typed_text(self.values.get(removed.key))
        renamed = next((key for key, value in new.items() if typed_text(value) == old), None)
        # Otherwise the first new key takes the removed line's comment (`compute_type: bf16
        # # use bfloat16` -> `bf16: true  # use bfloat16`): it was written about that setting.
        comment = "" if renamed is not None else _trailing_comment(removed)
        out = []
        for key, value in new.items():
            written = _render_key(key) if key == renamed else None
            if written is not None:
                first = written + removed.lines[0][removed.key_end :]
                shift = len(written) - removed.key_end
                span = None if removed.value_span is None else (removed.value_span[0] + shift, removed.value_span[1] + shift)
                out.append(_Segment([first, *removed.lines[1:]], key, span, len(written)))
            else:
                out.append(self._entry(key, value, comment))
                comment = ""
        return out

    def _entry(self, key: str, value: Any, comment: str = "") -> _Segment:
        """A new entry; `comment` (`  # ...`) goes at the end of its line when it is one line."""
        lines = _LINE.findall(_render_entry(key, _plain(value), self.newline))
        if len(lines) != 1:
            return _Segment(lines, key)
        body = lines[0].removesuffix(self.newline)
        line = body + comment + lines[0][len(body) :]
        # Where its key and value sit, so that a later fix of the same key keeps the comment.
        written_key, written_value = _render_key(key), _render_value(_plain(value))
        if written_key is None or written_value is None or body != f"{written_key}: {written_value}":
            return _Segment([line], key)
        start = len(written_key) + 2
        return _Segment([line], key, (start, start + len(written_value)) if written_value else None, len(written_key))

    def _replaced(self, segment: _Segment, value: Any) -> _Segment:
        assert segment.key is not None
        written = _render_value(_plain(value))
        if segment.value_span is not None and written is not None:
            line = segment.lines[0]
            start, end = segment.value_span
            line = line[:start] + written + line[end:]  # a trailing comment stays
            return _Segment([line], segment.key, (start, start + len(written)), segment.key_end)
        entry = self._entry(segment.key, value, _trailing_comment(segment))
        if segment.lines and not segment.lines[-1].endswith("\n"):
            entry.lines[-1] = entry.lines[-1].removesuffix(self.newline)
        return entry


_KEY_LINE_REST = re.compile(r"\s*:(?P<comment>[ \t]+#[^\r\n]*)?[ \t]*\r?\n?")


def _trailing_comment(segment: _Segment) -> str:
    """The comment at the end of an entry's key line (`  # use bfloat16`, with the blanks
    before it), or "". Only where the line's layout is known: after a value on that line
    alone, or after a key whose value is on the lines below (or empty)."""
    if not segment.lines:
        return ""
    line = segment.lines[0]
    if segment.value_span is not None:
        rest = line[segment.value_span[1] :].rstrip("\r\n")
        match = re.fullmatch(r"([ \t]+#.*)?[ \t]*", rest)
        return (match.group(1) or "") if match else ""
    match = _KEY_LINE_REST.fullmatch(line[segment.key_end :])
    return (match.group("comment") or "") if match else ""


def _gap(line: str) -> bool:
    """A blank line or a comment line."""
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _plain(value: Any) -> Any:
    """A value as dump_yaml writes it (JSON's types)."""
    return json.loads(json.dumps(value, default=str))


__all__ = ["apply_patch", "patch_yaml_text", "typed_text"]
