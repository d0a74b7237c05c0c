"""LLaMA-Factory's own word on a config, asked in a helper process.

RocBoard's rules (backend/config/checks.py, backend/config/yaml_import.py) know the mistakes people make;
LLaMA-Factory's argument parser knows which keys and values really exist. Its answer costs
an import of torch, transformers and llamafactory (about 7-10 s and 1 GB on a small CPU, see
docs/estimate.md for the measured figures), so it runs in `backend/llama_factory/worker.py`, a
separate process started with an argument list, and the web process stays light.

The answer is turned into findings in plain words: which keys are unknown (with a "did you
mean" from the static list of real keys), which key has a value of the wrong kind, and what
LLaMA-Factory's cross-key rules said, pinned to the key the message names.
"""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from backend.findings import Finding
from backend.security.child_env import child_env

WORKER = Path(__file__).resolve().with_name("worker.py")
NAMES_FILE = Path(__file__).resolve().with_name("llamafactory_names.json")
GENERAL_KEY = "llamafactory"  # findings about the check itself, not one key


@dataclass(frozen=True)
class LlamaFactoryNames:
    """What the installed LLaMA-Factory accepts, from the committed static list."""

    keys: frozenset[str]
    templates: frozenset[str]
    versions: dict[str, str]


@lru_cache(maxsize=1)
def static_names() -> LlamaFactoryNames:
    """The static list written by `python -m backend.llama_factory.worker --names` (a test keeps it
    equal to the installed package)."""
    data = json.loads(NAMES_FILE.read_text(encoding="utf-8"))
    return LlamaFactoryNames(frozenset(data["keys"]), frozenset(data["templates"]), dict(data["versions"]))


def did_you_mean(word: str, choices: frozenset[str] | set[str]) -> str | None:
    """The one close spelling of `word` among `choices`, if there is one."""
    matches = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.75)
    return matches[0] if matches else None


@dataclass(frozen=True)
class WorkerAnswer:
    findings: list[list[Finding]]  # one list per config, in order
    seconds: float  # wall time of the whole helper process
    import_seconds: float | None  # of which importing llamafactory (None when it failed)


def check_with_llamafactory(args: dict[str, Any], timeout_s: float = 120) -> list[Finding]:
    """LLaMA-Factory's parser on one set of training arguments, as findings. Creates no files
    outside a temporary directory the helper removes."""
    return check_many_with_llamafactory([args], timeout_s).findings[0]


def check_many_with_llamafactory(configs: list[dict[str, Any]], timeout_s: float = 120) -> WorkerAnswer:
    """Several configs in one helper process: the import is paid once. When the app runs the
    long-lived LLaMA-Factory helper (helper_client.py), the check is a fork of it (tens of
    milliseconds once it is ready; while it still imports, this waits for it rather than
    paying a second import); else a one-shot worker.py."""
    started = time.perf_counter()
    warm = _check_with_helper(configs, timeout_s, started)
    if warm is not None:
        return warm
    request = json.dumps({"configs": [_jsonable(c) for c in configs]})
    try:
        done = subprocess.run(
            [sys.executable, str(WORKER)],
            input=request,
            # The allow-listed environment only: no ROCBOARD_AUTH or other secret in the helper.
            env=child_env(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return _timed_out(configs, timeout_s, started)
    seconds = time.perf_counter() - started
    answer = last_json_line(done.stdout)
    if answer is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        # The helper's last line of output is the tool's own words: shown as written.
        finding = Finding.of(GENERAL_KEY, "lf-unavailable", severity="warning", code=done.returncode, output=tail[:300])
        return WorkerAnswer([[finding] for _ in configs], seconds, None)
    return _answer_to_findings(answer, configs, seconds)


def _check_with_helper(configs: list[dict[str, Any]], timeout_s: float, started: float) -> WorkerAnswer | None:
    """The long-lived helper's answer, or None when there is no helper to ask."""
    from backend.llama_factory.helper_client import shared

    helper = shared()
    if helper is None:
        return None
    try:
        answer = helper.check([_jsonable(c) for c in configs], timeout_s)
    except TimeoutError:
        return _timed_out(configs, timeout_s, started)
    if answer is None:
        return None  # the helper is gone or failing: the one-shot worker answers
    return _answer_to_findings(answer, configs, time.perf_counter() - started)


def _timed_out(configs: list[dict[str, Any]], timeout_s: float, started: float) -> WorkerAnswer:
    finding = Finding.of(GENERAL_KEY, "lf-timeout", severity="warning", seconds=f"{timeout_s:g}")
    return WorkerAnswer([[finding] for _ in configs], time.perf_counter() - started, None)


def _answer_to_findings(answer: dict[str, Any], configs: list[dict[str, Any]], seconds: float) -> WorkerAnswer:
    if not answer.get("ok"):
        error = answer.get("error", {})
        finding = Finding.of(GENERAL_KEY, "lf-import-failed", error=f"{error.get('type')}: {str(error.get('message'))[:300]}")
        return WorkerAnswer([[finding] for _ in configs], seconds, None)
    per_config = [findings_from_result(result, config) for result, config in zip(answer["results"], configs, strict=True)]
    return WorkerAnswer(per_config, seconds, answer.get("import_s"))


def _jsonable(args: dict[str, Any]) -> dict[str, Any]:
    # YAML can hold dates and the like; the parser only ever sees what JSON can carry.
    return json.loads(json.dumps(args, default=str))


def last_json_line(stdout: str) -> dict[str, Any] | None:
    """A helper's answer: the last line of its stdout that is a JSON object (a library may
    print before it)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def findings_from_result(result: dict[str, Any], args: dict[str, Any]) -> list[Finding]:
    """Plain-word findings from one of the helper's results (pure: tested without the helper)."""
    findings: list[Finding] = []
    names = static_names()
    for key in result.get("unknown_keys", []):
        guess = did_you_mean(key, names.keys)
        findings.append(
            Finding.of(
                key,
                "lf-unknown-key",
                message=_unknown_key_message(guess, args),
                patch={key: None, guess: args.get(key)} if guess and guess not in args else {key: None},
                guess=guess or "",
            )
        )
    for bad in result.get("bad_values", []):
        message, params = _expected_message(str(bad["expected"]))
        findings.append(Finding.of(bad["key"], "lf-bad-value", message=message, value=bad["value"], **params))
    error = result.get("error")
    if error and not any(re.search(p, str(error.get("message", ""))) for p in _LAUNCH_CONTEXT_MESSAGES):
        findings.append(_finding_from_error(error, args))
    return findings


# Refusals about how the check's process was started, not about the config: the helper runs
# one process on the CPU, while llamafactory-cli starts torchrun itself where the config needs it.
_LAUNCH_CONTEXT_MESSAGES = (
    r"Please use `FORCE_TORCHRUN=1`",
    r"Please launch distributed training with",
    r"Default process group has not been initialized",
)


def _unknown_key_message(guess: str | None, args: dict[str, Any]) -> str:
    """The message id of an unknown key's fix: remove it, rename it, or remove it because the
    key it resembles is already set."""
    if guess is None:
        return ""
    return "lf-unknown-key-already-set" if guess in args else "lf-unknown-key-rename"


# lf_check_worker.py's words for what a key takes (its `_bad_value`), by message id: the page
# renders them in its language. A wording the worker adds later is shown as written.
_EXPECTED_MESSAGES = {
    "a whole number": "lf-bad-value-int",
    "a number": "lf-bad-value-float",
    "true or false": "lf-bad-value-bool",
    "a text value": "lf-bad-value-text",
}


def _expected_message(expected: str) -> tuple[str, dict[str, Any]]:
    """(message id, its parameters) of "LLaMA-Factory expects <expected>"."""
    if expected in _EXPECTED_MESSAGES:
        return _EXPECTED_MESSAGES[expected], {}
    if expected.startswith("one of "):
        return "lf-bad-value-choice", {"choices": expected[len("one of ") :]}
    return "", {"expected": expected}


# LLaMA-Factory and transformers messages that deserve plainer words: (pattern, key, message
# id); the words are the catalogue's `check.<message id>.problem` / `.fix`.
_KNOWN_MESSAGES: tuple[tuple[str, str, str], ...] = (
    (r"At most one of fp16 and bf16", "bf16", "lf-rejected-bf16-fp16"),
    (r"Invalid fine-tuning method", "finetuning_type", "lf-rejected-finetuning-type"),
    (r"Quantization is only compatible with the LoRA", "quantization_bit", "lf-rejected-quantization-lora"),
    (r"Cannot use device map for quantized models in training", "quantization_device_map", "lf-rejected-device-map"),
    (r"Please specify dataset for training", "dataset", "lf-rejected-no-dataset"),
    (r"Please provide `model_name_or_path`", "model_name_or_path", "lf-rejected-no-model"),
    (r"requires non-zero --logging_steps", "logging_steps", "lf-rejected-logging-steps"),
    (r"requires non-zero --save_steps", "save_steps", "lf-rejected-save-steps"),
    (r"Please make sure eval_dataset be provided or val_size", "val_size", "lf-rejected-no-eval-data"),
)


def _finding_from_error(error: dict[str, str], args: dict[str, Any]) -> Finding:
    message = str(error.get("message", "")).strip()
    for pattern, key, message_id in _KNOWN_MESSAGES:
        if re.search(pattern, message):
            # Our words; LLaMA-Factory's own line quoted beside them (searchable as it wrote it).
            return Finding.of(key, "lf-rejected", message=message_id, quote=message[:400])
    key = _key_named_in(message, args)
    # LLaMA-Factory's own message stays as written, inside our sentence.
    said = message[:400] or str(error.get("type"))
    if key == GENERAL_KEY:
        return Finding.of(key, "lf-rejected", message="lf-rejected-any-key", said=said)
    return Finding.of(key, "lf-rejected", said=said)


def _key_named_in(message: str, args: dict[str, Any]) -> str:
    """The first key of `args` the message mentions (LLaMA-Factory writes `key` or --key)."""
    for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", message):
        if word in args:
            return word
    return GENERAL_KEY


def merge_findings(ours: list[Finding], theirs: list[Finding]) -> list[Finding]:
    """Our findings, then LLaMA-Factory's about keys where we found no problem (problems first)."""
    flagged = {f.key for f in ours if f.severity == "problem"}
    merged = ours + [f for f in theirs if f.key not in flagged]
    return sorted(merged, key=lambda f: f.severity != "problem")


__all__ = [
    "LlamaFactoryNames",
    "WorkerAnswer",
    "check_many_with_llamafactory",
    "check_with_llamafactory",
    "did_you_mean",
    "findings_from_result",
    "merge_findings",
    "static_names",
]
