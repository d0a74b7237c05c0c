"""Reading a LLaMA-Factory YAML as llamafactory-cli does (OmegaConf's typing: `1e-4` is a
float), bounded: size, nesting, values reachable through aliases, duplicate keys. Used by
the import (yaml_import.py) and by Other keys (other_keys.py); imports nothing of
backend.config's package so that either may use it."""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from backend.findings import Finding

MAX_NESTED_VALUES = 10_000  # a training config has ~50 scalars; aliases can make millions
# A training config nests a list one level down; PyYAML builds nested values recursively,
# so a 50,000-deep list would exhaust the stack: refused before and while parsing.
MAX_NESTING = 32
FILE_KEY = "file"  # findings about the file as a whole


def _shown(value: Any, limit: int = 40) -> str:
    """A key that is not text, as a finding names it: short and cheap (config.shown's rule;
    the loader already refused integers too long to print)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return str(value) if abs(value) < 10**15 else f"{float(value):.3g}"
    if isinstance(value, float):
        return f"{value:g}" if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple, dict, set)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    text = str(value)
    return repr(text if len(text) <= limit else text[:limit] + "…")


class _LlamaFactoryLoader(yaml.SafeLoader):
    """yaml.SafeLoader as OmegaConf (what llamafactory-cli uses) configures it: `1e-4` is a
    float, dates stay strings; duplicate keys are recorded instead of silently overwritten."""

    duplicates: list[str]

    def construct_yaml_int(self, node):
        # int() of more than 4,300 digits raises ValueError (Python 3.11's limit) and far
        # fewer are already outside every range: such a number stays its text, which
        # parse_form refuses with a range finding naming the key.
        digits = str(node.value).lstrip("+-").replace("_", "")
        if digits.isdigit() and len(digits) > 30:
            return str(node.value)
        return super().construct_yaml_int(node)

    def construct_mapping(self, node, deep=False):
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    self.duplicates.append(str(key))
                seen.add(key)
            except TypeError:  # an unhashable key; construct_mapping reports it
                pass
        return super().construct_mapping(node, deep=deep)


_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.VERBOSE,
)
# Copy the resolver table (lists too) so SafeLoader itself is left untouched.
_LlamaFactoryLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:float")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "-+0123456789.":
    _LlamaFactoryLoader.yaml_implicit_resolvers.setdefault(_first, []).insert(0, ("tag:yaml.org,2002:float", _FLOAT))
_LlamaFactoryLoader.add_constructor("tag:yaml.org,2002:int", _LlamaFactoryLoader.construct_yaml_int)


def _too_deep() -> Finding:
    return Finding.of(FILE_KEY, "yaml-too-deep", limit=MAX_NESTING)


# PyYAML's commonest problems (its own English), each with its own message: the message id
# (check.<id>.problem / .fix) and the pattern of PyYAML's words, whose groups are the params.
# The first that matches wins: the specific "expected" wordings come before the general ones.
_SYNTAX_AT: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (message, re.compile(pattern, re.DOTALL))
    for message, pattern in (
        ("yaml-syntax-mapping-values", r"mapping values are not allowed here"),
        ("yaml-syntax-missing-colon", r"could not find expected ':'"),
        ("yaml-syntax-bad-start", r"found character (?P<character>.*) that cannot start any token"),
        ("yaml-syntax-end-of-stream", r"found unexpected end of stream"),
        ("yaml-syntax-block-end", r"expected <block end>, but found (?P<found>.*)"),
        ("yaml-syntax-open-list", r"expected ',' or '\]', but got (?P<found>.*)"),
        ("yaml-syntax-open-mapping", r"expected ',' or '\}', but got (?P<found>.*)"),
        ("yaml-syntax-document-start", r"expected '<document start>', but found (?P<found>.*)"),
        ("yaml-syntax-expected-found", r"expected (?P<expected>.*?), but found (?P<found>.*)"),
        ("yaml-syntax-undefined-alias", r"found undefined alias (?P<alias>.*)"),
        ("yaml-syntax-anchor-twice", r"second occurrence"),
        ("yaml-syntax-unhashable-key", r"found unhashable key"),
        ("yaml-syntax-unknown-escape", r"found unknown escape character (?P<character>.*)"),
        ("yaml-syntax-unknown-tag", r"could not determine a constructor for the tag (?P<tag>.*)"),
        ("yaml-syntax-second-document", r"but found another document"),
    )
)
# Without a position: the reader's refusal of a control character (a binary file).
_SYNTAX_NOWHERE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("yaml-syntax-control-character", re.compile(r"unacceptable character (?P<character>.*): special characters are not allowed", re.DOTALL)),
)


def _syntax_error(what: str, line: int | None = None, column: int | None = None) -> Finding:
    """The finding for PyYAML's problem `what` (at 1-based `line`, `column` when known)."""
    at: dict[str, Any] = {"line": line, "column": column} if line is not None else {}
    for message, pattern in _SYNTAX_AT if at else _SYNTAX_NOWHERE:
        match = pattern.fullmatch(what)
        if match is not None:
            groups: dict[str, Any] = match.groupdict()
            return Finding.of(FILE_KEY, "yaml-syntax", message=message, **at, **groups)
    if at:
        return Finding.of(FILE_KEY, "yaml-syntax", error=what, **at)
    return Finding.of(FILE_KEY, "yaml-syntax", message="yaml-syntax-no-position", error=what)


def _flow_depth(text: str) -> int:
    """The deepest nesting of [ and { in `text` (brackets inside quotes count too: an
    over-estimate only for configs no one writes)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    return deepest


def load_yaml_text(text: str, max_bytes: int = 256_000) -> tuple[dict[str, Any] | None, list[Finding]]:
    """The mapping a YAML text holds, or None and a finding saying why not."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > max_bytes:
        return None, [Finding.of(FILE_KEY, "yaml-too-large", size=f"{size:,}", limit=f"{max_bytes:,}")]
    if not text.strip():
        return None, [Finding.of(FILE_KEY, "yaml-empty")]
    if _flow_depth(text) > MAX_NESTING:
        return None, [_too_deep()]
    loader = None
    try:
        # The reader rejects control characters as soon as it is built: inside the try.
        loader = _LlamaFactoryLoader(text)
        loader.duplicates = []
        data = loader.get_single_data()
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        what = getattr(error, "problem", None) or str(error).splitlines()[0]
        if where is None:
            return None, [_syntax_error(what)]
        return None, [_syntax_error(what, where.line + 1, where.column + 1)]
    except RecursionError:  # block nesting ("- - - - x", deep indentation) the scan cannot see
        return None, [_too_deep()]
    except (ValueError, OverflowError, TypeError, KeyError) as error:  # a constructor's own refusal of a value (`!!bool maybe`: KeyError)
        what = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        return None, [_syntax_error(what)]
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        if isinstance(data, list):
            return None, [Finding.of(FILE_KEY, "yaml-not-mapping")]
        if data is None:  # nothing but comments
            return None, [Finding.of(FILE_KEY, "yaml-not-mapping", message="yaml-not-mapping-null")]
        return None, [Finding.of(FILE_KEY, "yaml-not-mapping", message="yaml-not-mapping-value", type=type(data).__name__)]
    findings = [
        Finding.of(key, "yaml-duplicate-key")
        for key in dict.fromkeys(loader.duplicates)
    ]
    bad_keys = [k for k in data if not isinstance(k, str)]
    for key in bad_keys:
        findings.append(Finding.of(_shown(key), "yaml-key-not-text", patch={}))
    count, depth = _count_values(data, MAX_NESTED_VALUES)
    if count > MAX_NESTED_VALUES:
        return None, [Finding.of(FILE_KEY, "yaml-too-many-values")]
    if depth > MAX_NESTING:
        return None, [_too_deep()]
    return {k: v for k, v in data.items() if isinstance(k, str)}, findings


def _count_values(value: Any, budget: int) -> tuple[int, int]:
    """(values reachable from `value`, counting shared ones each time, up to budget + 1;
    the deepest nesting seen). Iterative: no recursion over what the file nests."""
    count, deepest, stack = 0, 0, [(value, 0)]
    while stack and count <= budget:
        item, depth = stack.pop()
        count += 1
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item.keys())
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
    return count, deepest


