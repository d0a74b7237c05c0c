"""Helper process: runs LLaMA-Factory's own argument parser over training configs.

The web process never imports llamafactory (about 1 GB and several seconds); it starts this
script instead (see backend/llama_factory/check.py). This file imports nothing from RocBoard, so it
runs the same whether started as `python -m backend.llama_factory.worker` or by its path.

Protocol: one JSON object on stdin,
    {"configs": [{...training args...}, ...], "names": true|false}
and one JSON object as the last line of stdout,
    {"ok": true, "import_s": 7.1, "results": [{"unknown_keys": [...],
      "bad_values": [{"key", "value", "expected"}], "error": {"type", "message"} | null,
      "parse_s": 0.01}, ...], "names": {"keys": [...], "templates": [...], "versions": {...}}}
or {"ok": false, "error": {"type", "message"}} when LLaMA-Factory cannot even be imported.

`python -m backend.llama_factory.worker --names` prints only the names (for the static list).

The long-lived helper (zygote.py) runs the same `_check_one` in a fork for each check:
keep these functions free of RocBoard imports and of process-wide state.

What it checks, in order, for each config:
1. keys that none of LLaMA-Factory's argument dataclasses has (its parser would refuse them);
2. values its command-line parser would refuse for a key (type or choices): `parse_dict`,
   which `llamafactory-cli train x.yaml` uses, does no conversion, so "abc" as a learning
   rate would only fail later, inside the trainer;
3. `get_train_args` on what is left, which runs LLaMA-Factory's cross-key rules without
   loading the model or the data.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import tempfile
import time
from typing import Any

# Keys whose validation needs a live machine that the check does not have: the device
# checks belong to RocBoard's preset rules, and a distributed backend can only start under
# torchrun. Their values are still checked against the parser's types and choices.
_DEVICE_KEYS = ("use_cpu", "ddp_backend", "ddp_timeout", "local_rank")


def _quiet_environment() -> None:
    """No accelerator and no process group for a check: quiet_env.py, loaded by its path."""
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "quiet_env.py"))["quiet_environment"]()


def _parser():
    from llamafactory.hparams.parser import _TRAIN_ARGS
    from transformers import HfArgumentParser

    return HfArgumentParser(_TRAIN_ARGS)


def _known_keys(parser) -> set[str]:
    import dataclasses

    return {f.name for dtype in parser.dataclass_types for f in dataclasses.fields(dtype) if f.init}


def _names(parser) -> dict[str, Any]:
    from importlib import metadata

    from llamafactory.data.template import TEMPLATES

    return {
        "keys": sorted(_known_keys(parser)),
        "templates": sorted(TEMPLATES),
        "versions": {name: metadata.version(name) for name in ("llamafactory", "transformers")},
    }


def _bad_value(action, value: Any) -> str | None:
    """What the command-line parser expects for `action`, when `value` is not that; else None."""
    if value is None or isinstance(value, (list, dict)) or action.type is None:
        return None  # None = the default; lists and mappings are passed through as they are
    kind = getattr(action.type, "__name__", "")
    expected = {"float": "a number", "int": "a whole number", "string_to_bool": "true or false"}.get(kind, "a text value")
    if action.choices:
        expected = f"one of {', '.join(map(str, action.choices))}"
    if isinstance(value, bool) and action.type in (int, float):
        return expected  # YAML read yes/no/on/off as a boolean
    if action.type is int and isinstance(value, float):
        if not value.is_integer():
            return expected
        value = int(value)
    try:
        converted = action.type(str(value))
    except (TypeError, ValueError):
        return expected
    if action.choices and converted not in action.choices:
        return expected
    return None


def _check_one(parser, known: set[str], args: dict[str, Any]) -> dict[str, Any]:
    from llamafactory.hparams import get_train_args

    unknown = sorted(key for key in args if key not in known)
    bad_values = []
    for key in sorted(set(args) - set(unknown)):
        action = parser._option_string_actions.get(f"--{key}")
        expected = _bad_value(action, args[key]) if action is not None else None
        if expected is not None:
            bad_values.append({"key": key, "value": repr(args[key]), "expected": expected})
    skip = set(unknown) | {b["key"] for b in bad_values} | set(_DEVICE_KEYS)
    sane = {key: value for key, value in args.items() if key not in skip}
    error = None
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rocboard-lfcheck-") as scratch:
        # The check must leave nothing behind: output goes to a directory that is removed.
        sane["output_dir"] = os.path.join(scratch, "output")
        sane["overwrite_output_dir"] = True
        sane["use_cpu"] = True
        try:
            get_train_args(sane)
        except BaseException as exc:  # noqa: BLE001 - SystemExit and AssertionError are answers too
            error = {"type": type(exc).__name__, "message": str(exc)}
    return {"unknown_keys": unknown, "bad_values": bad_values, "error": error, "parse_s": round(time.perf_counter() - started, 4)}


def main(argv: list[str]) -> int:
    _quiet_environment()
    real_stdout = sys.stdout
    request: dict[str, Any]
    if "--names" in argv:
        request = {"configs": [], "names": True}
    else:
        request = json.load(sys.stdin)
    answer: dict[str, Any]
    # LLaMA-Factory and transformers print to stdout; keep stdout for the answer alone.
    with contextlib.redirect_stdout(sys.stderr):
        started = time.perf_counter()
        try:
            parser = _parser()
            known = _known_keys(parser)
        except BaseException as exc:  # noqa: BLE001 - report any import failure as the answer
            answer = {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)}}
        else:
            answer = {"ok": True, "import_s": round(time.perf_counter() - started, 3)}
            answer["results"] = [_check_one(parser, known, dict(config)) for config in request.get("configs", [])]
            if request.get("names"):
                answer["names"] = _names(parser)
    if "--names" in argv:
        real_stdout.write(json.dumps(answer.get("names", answer), indent=1) + "\n")
    else:
        real_stdout.write(json.dumps(answer) + "\n")
    real_stdout.flush()
    return 0 if answer["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
