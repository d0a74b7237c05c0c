"""Helper process: the catalogue of every key LLaMA-Factory's training parser reads.

The web process never imports llamafactory; backend/llama_factory/keys.py starts this script
(by its path, with an allow-listed environment) once per installed LLaMA-Factory +
transformers version and caches its answer. This file imports nothing from RocBoard.

For every init field of the dataclasses `llamafactory.hparams.parser._TRAIN_ARGS` hands to
`HfArgumentParser` (ModelArguments, DataArguments, TrainingArguments - transformers'
Seq2SeqTrainingArguments subclass -, FinetuningArguments, GeneratingArguments), one entry:

    {"name", "source" (the dataclass), "annotation" (the raw annotation text),
     "type" ("int", "optional[str]", "dict|str", "any", ...), "kinds" (the JSON kinds a YAML
     value may have: bool/int/float/str/list/dict/any), "optional" (None is allowed: the
     annotation says so, or the default is None), "choices" (from Literal / Enum members, or
     null), "items" ({"kinds", "choices"} of a list's items, or null), "default" (JSON),
     "default_kind" ("value" | "factory" | "unserialisable" | "required"; the default is
     null unless "value"), "help" (metadata["help"], at most 300 characters)}

Usage:
    python backend/llama_factory/keys_worker.py              one JSON line:
        {"ok": true, "import_s", "build_s", "catalogue": {...}} or {"ok": false, "error": {...}}
    python -m backend.llama_factory.keys_worker --catalogue  the catalogue alone, a key a line
        (> backend/llama_factory/llamafactory_keys.json: the shipped fallback)
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import math
import os
import runpy
import sys
import time
import types
import typing
from pathlib import Path
from typing import Any

CATALOGUE_FORMAT = 1
HELP_CHARS = 300
KINDS = ("bool", "int", "float", "str", "list", "dict", "any")

if __name__ == "__main__" and sys.path and sys.path[0]:
    # Run by its path, Python puts this folder first on sys.path, where RocBoard's check.py
    # and keys.py would shadow any top-level module of the same name a library imports.
    with contextlib.suppress(OSError):
        if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
            del sys.path[0]


def _quiet_environment() -> None:
    """The same environment as worker.py's: quiet_env.py, loaded by its path."""
    runpy.run_path(str(Path(__file__).resolve().with_name("quiet_env.py")))["quiet_environment"]()


def versions() -> dict[str, str | None]:
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in ("llamafactory", "transformers"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


# --- one annotation -> kinds, choices, items ---------------------------------------------------


def _plain(value: Any) -> Any:
    """An Enum member or a Literal value as the plain value a YAML file would hold."""
    return value.value if isinstance(value, enum.Enum) else value


def _kind_of_value(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    return "str"


def _members(hint: Any) -> tuple[list[Any], bool]:
    """(the union's members other than None, whether None is one of them)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        return [a for a in args if a is not type(None)], any(a is type(None) for a in args)
    if hint is type(None):
        return [], True
    return [hint], False


def _shape(hint: Any) -> dict[str, Any]:
    """{"kinds", "choices", "items", "optional"} of one annotation."""
    members, optional = _members(hint)
    kinds: list[str] = []
    choices: list[Any] = []
    items: dict[str, Any] | None = None
    has_enum = False

    def add(kind: str) -> None:
        if kind not in kinds:
            kinds.append(kind)

    for member in members:
        origin = typing.get_origin(member)
        if member is typing.Any:
            add("any")
        elif origin is typing.Literal:
            for value in typing.get_args(member):
                if value is None:
                    optional = True
                elif _plain(value) not in choices:
                    choices.append(_plain(value))
        elif isinstance(member, type) and issubclass(member, enum.Enum):
            has_enum = True
            choices.extend(_plain(m) for m in member if _plain(m) not in choices)
        elif member is bool:
            add("bool")
        elif member is int:
            add("int")
        elif member is float:
            add("float")
        elif member is str or (isinstance(member, type) and issubclass(member, os.PathLike)):
            add("str")  # a path is written as text in YAML
        elif member in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, typing.Sequence):
            add("list")
            args = [a for a in typing.get_args(member) if a is not Ellipsis]
            if len(args) == 1 and items is None:
                inner = _shape(args[0])
                items = {"kinds": inner["kinds"], "choices": inner["choices"]}
        elif member is dict or origin in (dict, typing.Mapping):
            add("dict")
        else:
            add("any")  # a class of its own (GenerationConfig, ParallelismConfig): not checked here
    if has_enum and "str" in kinds:
        # `SchedulerType | str` and friends: the dataclass converts the text to the Enum in
        # __post_init__, so only the Enum's values are accepted.
        kinds.remove("str")
    return {"kinds": kinds, "choices": choices or None, "items": items, "optional": optional}


def _type_text(kinds: list[str], choices: list[Any] | None, optional: bool) -> str:
    shown = list(kinds)
    for value in choices or ():
        kind = _kind_of_value(value)
        if kind not in shown:
            shown.append(kind)
    text = "|".join(shown) or "any"
    if "any" in shown:
        text = "any"
    return f"optional[{text}]" if optional and text != "any" else text


def _annotation_text(annotation: Any) -> str:
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation.__name__
    return repr(annotation).replace("typing.", "")


def _jsonable_default(value: Any) -> tuple[Any, bool]:
    """(the default as JSON, whether it could be written)."""
    value = _plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None, False
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return None, False
    return json.loads(text), True


def _help(field: dataclasses.Field) -> str:
    text = field.metadata.get("help", "") if field.metadata else ""
    return " ".join(str(text).split())[:HELP_CHARS]


def entry(source: str, field: dataclasses.Field, hint: Any) -> dict[str, Any]:
    shape = _shape(hint)
    if field.default is not dataclasses.MISSING:
        default, ok = _jsonable_default(field.default)
        default_kind = "value" if ok else "unserialisable"
        if field.default is None:
            shape["optional"] = True  # `str = None` is common: None is what it holds unless set
    elif field.default_factory is not dataclasses.MISSING:
        default, default_kind = None, "factory"
    else:
        default, default_kind = None, "required"
    choices = shape["choices"]
    if field.metadata and field.metadata.get("choices"):
        choices = [_plain(c) for c in field.metadata["choices"]]
    return {
        "name": field.name,
        "source": source,
        "annotation": _annotation_text(field.type),
        "type": _type_text(shape["kinds"], choices, shape["optional"]),
        "kinds": shape["kinds"],
        "optional": shape["optional"],
        "choices": choices,
        "items": shape["items"],
        "default": default,
        "default_kind": default_kind,
        "help": _help(field),
    }


def build_catalogue(dataclass_types: list[type]) -> dict[str, Any]:
    keys: dict[str, dict[str, Any]] = {}
    for dtype in dataclass_types:
        try:
            hints = typing.get_type_hints(dtype)
        except Exception:  # noqa: BLE001 - an unresolvable annotation: fall back per field
            hints = {}
        for field in dataclasses.fields(dtype):
            if not field.init or field.name in keys:
                continue  # HfArgumentParser refuses duplicates; the first class would win
            hint = hints.get(field.name, field.type)
            if isinstance(hint, str):
                hint = typing.Any
            keys[field.name] = entry(dtype.__name__, field, hint)
    return {
        "format": CATALOGUE_FORMAT,
        "versions": versions(),
        "dataclasses": [dtype.__name__ for dtype in dataclass_types],
        "keys": [keys[name] for name in sorted(keys)],
    }


def dumps_catalogue(catalogue: dict[str, Any]) -> str:
    """The catalogue as text, one key a line (the shipped file reads well in a diff)."""
    head = {name: value for name, value in catalogue.items() if name != "keys"}
    lines = [json.dumps(head, ensure_ascii=False)[:-1] + ', "keys": [']
    keys = catalogue.get("keys", [])
    lines += [json.dumps(key, ensure_ascii=False) + ("," if i < len(keys) - 1 else "") for i, key in enumerate(keys)]
    return "\n".join(lines) + "\n]}\n"


def main(argv: list[str]) -> int:
    _quiet_environment()
    real_stdout = sys.stdout
    answer: dict[str, Any]
    # LLaMA-Factory and transformers print to stdout; keep stdout for the answer alone.
    with contextlib.redirect_stdout(sys.stderr):
        started = time.perf_counter()
        try:
            from llamafactory.hparams.parser import _TRAIN_ARGS
        except BaseException as exc:  # noqa: BLE001 - report any import failure as the answer
            answer = {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:2000]}}
        else:
            imported = time.perf_counter()
            catalogue = build_catalogue(list(_TRAIN_ARGS))
            answer = {
                "ok": True,
                "import_s": round(imported - started, 3),
                "build_s": round(time.perf_counter() - imported, 4),
                "catalogue": catalogue,
            }
    if "--catalogue" in argv and answer["ok"]:
        real_stdout.write(dumps_catalogue(answer["catalogue"]))
    else:
        real_stdout.write(json.dumps(answer, ensure_ascii=False) + "\n")
    real_stdout.flush()
    return 0 if answer["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
