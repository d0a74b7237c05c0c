"""LLaMA-Factory's own word on a config, asked in a helper process.

RocBoard's rules (backend/checks.py, backend/yaml_import.py) know the mistakes people make;
LLaMA-Factory's argument parser knows which keys and values really exist. Its answer costs
an import of torch, transformers and llamafactory (about 7-10 s and 1 GB on a small CPU, see
docs/estimate.md for the measured figures), so it runs in `backend/lf_check_worker.py`, a
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

from backend.child_env import child_env
from backend.findings import Finding

WORKER = Path(__file__).resolve().with_name("lf_check_worker.py")
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
    """The static list written by `python -m backend.lf_check_worker --names` (a test keeps it
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
    """Several configs in one helper process: the import is paid once."""
    started = time.perf_counter()
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
        finding = Finding(
            GENERAL_KEY,
            f"LLaMA-Factory's own check did not answer within {timeout_s:g} s.",
            "Try again when the machine is less busy, or skip this check (--no-llamafactory).",
            severity="warning",
            rule="lf-timeout",
        )
        return WorkerAnswer([[finding] for _ in configs], time.perf_counter() - started, None)
    seconds = time.perf_counter() - started
    answer = _last_json_line(done.stdout)
    if answer is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        finding = Finding(
            GENERAL_KEY,
            f"LLaMA-Factory's own check failed to run (exit {done.returncode}: {tail[:300]}).",
            "Check that llamafactory is installed in this Python environment (`llamafactory-cli version`).",
            severity="warning",
            rule="lf-unavailable",
        )
        return WorkerAnswer([[finding] for _ in configs], seconds, None)
    if not answer.get("ok"):
        error = answer.get("error", {})
        finding = Finding(
            GENERAL_KEY,
            f"LLaMA-Factory cannot be imported here ({error.get('type')}: {str(error.get('message'))[:300]}); a run would fail the same way.",
            "Install the versions in requirements.txt into this environment (`make setup`).",
            rule="lf-import-failed",
        )
        return WorkerAnswer([[finding] for _ in configs], seconds, None)
    per_config = [findings_from_result(result, config) for result, config in zip(answer["results"], configs)]
    return WorkerAnswer(per_config, seconds, answer.get("import_s"))


def _jsonable(args: dict[str, Any]) -> dict[str, Any]:
    # YAML can hold dates and the like; the parser only ever sees what JSON can carry.
    return json.loads(json.dumps(args, default=str))


def _last_json_line(stdout: str) -> dict[str, Any] | None:
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
            Finding(
                key,
                f"LLaMA-Factory has no key `{key}`; its parser refuses the whole file.",
                _unknown_key_fix(key, guess, args),
                rule="lf-unknown-key",
                patch={key: None, guess: args.get(key)} if guess and guess not in args else {key: None},
            )
        )
    for bad in result.get("bad_values", []):
        findings.append(
            Finding(
                bad["key"],
                f"LLaMA-Factory expects {bad['expected']} for `{bad['key']}`, not {bad['value']}.",
                f"Set `{bad['key']}` to {bad['expected']}.",
                rule="lf-bad-value",
            )
        )
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


def _unknown_key_fix(key: str, guess: str | None, args: dict[str, Any]) -> str:
    if guess is None:
        return f"Remove `{key}`."
    if guess in args:
        return f"Remove `{key}` (did you mean `{guess}`? It is already set)."
    return f"Rename it to `{guess}`."


# LLaMA-Factory and transformers messages that deserve plainer words: (pattern, key, problem, fix).
_KNOWN_MESSAGES: tuple[tuple[str, str, str, str], ...] = (
    (r"At most one of fp16 and bf16", "bf16", "bf16 and fp16 are both true.", "Set only one of bf16 or fp16 to true."),
    (r"Invalid fine-tuning method", "finetuning_type", "finetuning_type is not one LLaMA-Factory knows.", "Use lora, freeze or full (QLoRA is lora plus quantization_bit: 4)."),
    (r"Quantization is only compatible with the LoRA", "quantization_bit", "quantization_bit (QLoRA) only works with LoRA.", "Set finetuning_type: lora, or remove quantization_bit."),
    (r"Cannot use device map for quantized models in training", "quantization_device_map", "A device map cannot be used when training a quantized model.", "Remove quantization_device_map."),
    (r"Please specify dataset for training", "dataset", "No dataset is named.", "Set dataset to a name from dataset_info.json."),
    (r"Please provide `model_name_or_path`", "model_name_or_path", "No model is named.", "Set model_name_or_path to the model's local directory."),
    (r"requires non-zero --logging_steps", "logging_steps", "logging_steps is 0.", "Set logging_steps to 1 or more."),
    (r"requires non-zero --save_steps", "save_steps", "save_steps is 0.", "Set save_steps to 1 or more."),
)


def _finding_from_error(error: dict[str, str], args: dict[str, Any]) -> Finding:
    message = str(error.get("message", "")).strip()
    for pattern, key, problem, fix in _KNOWN_MESSAGES:
        if re.search(pattern, message):
            return Finding(key, problem, fix, rule="lf-rejected")
    key = _key_named_in(message, args)
    return Finding(
        key,
        f"LLaMA-Factory refuses this config: {message[:400] or error.get('type')}",
        f"Change `{key}` as the message says." if key != GENERAL_KEY else "Change the config as the message says.",
        rule="lf-rejected",
    )


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
