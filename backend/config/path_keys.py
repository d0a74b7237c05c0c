"""LLaMA-Factory keys that name a path: which the trainer writes, which it reads, and the rule
each value of Other keys (an import, "Run this YAML as it is") is held to.

- A key that **writes** (a cache, a log, a profile, a tokenized copy, an export) may name only
  a place inside the run: a relative path (the trainer runs in the run's directory) with no
  `..`. Everything a run writes stays in its folder, so deleting the run deletes it all.
- A key that **reads** may name a relative path (inside the run, or a hub id), or a path inside
  the data roots, the runs folder or the run's model folder, with no link leading out: the
  rule of a dataset path. The file itself is never opened here, so a refusal says nothing of
  what a file outside holds, or whether it exists.

Which keys are paths is read from LLaMA-Factory's own key catalogue
(backend/llama_factory/keys.py): `path_like(spec)` picks every text key whose name or help
says it is a path, and each such key must be classified below (`tests/test_path_keys.py`
fails on a new one). One that is not, in a newer LLaMA-Factory, is held to the read rule: the
stricter of the two that still lets a valid path through.

Imports the standard library and backend.config.paths only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from backend.config.paths import path_problem

Use = Literal["writes", "reads"]

# The keys of Other keys that name a path the trainer writes (LLaMA-Factory 0.9.5,
# transformers 5.x): each is refused outside the run.
WRITES: dict[str, str] = {
    "cache_dir": "the hub's download cache",
    "export_dir": "an exported model",
    "logging_dir": "TensorBoard's logs",
    "offload_folder": "offloaded weights",
    "profiler_output_dir": "torch profiler traces",
    "swanlab_logdir": "SwanLab's logs",
    "tokenized_path": "the tokenized dataset (saved when missing, loaded when there)",
}
# ... and those that name a file or folder it reads.
READS: dict[str, str] = {
    "accelerator_config": "an Accelerate JSON file (or a mapping)",
    "adapter_folder": "adapter weights",
    "adapter_name_or_path": "adapters (comma-separated paths or hub ids)",
    "deepspeed": "a DeepSpeed JSON file (or a mapping)",
    "export_quantization_dataset": "a calibration dataset",
    "fsdp_config": "an FSDP JSON file (or a mapping)",
    "generation_config": "a GenerationConfig file or model id",
    "hyper_parallel_args": "a HyperParallel JSON file",
    "kt_expert_checkpoint_path": "expert safetensors",
    "kt_weight_path": "pre-quantized expert weights",
    "media_dir": "the images, videos or audios of a dataset",
    "new_special_tokens_config": "a YAML of token descriptions (its text ends up in the tokenizer)",
    "ref_model": "a reference model",
    "ref_model_adapters": "a reference model's adapters",
    "reward_model": "a reward model",
    "reward_model_adapters": "a reward model's adapters",
}
# Keys `path_like` picks that name no path, each with the reason.
NOT_PATHS: dict[str, str] = {
    "export_hub_model_id": "a hub repository name to push to (pushing needs a token, never passed to a child)",
    "hub_model_id": "a hub repository name to push to",
    "metric_for_best_model": "a metric's name",
    "model_revision": "a branch, tag or commit of a hub model",
    "parallelism_config": "an Accelerate ParallelismConfig: a mapping, never a file",
    "sglang_config": "JSON text LLaMA-Factory parses (json.loads), never a file",
    "vllm_config": "JSON text LLaMA-Factory parses (json.loads), never a file",
}
# Keys with a path that are fields of the form (their own rules) or RocBoard's own to write.
FORM_OR_OWNED: frozenset[str] = frozenset({"dataset_dir", "model_name_or_path", "output_dir", "resume_from_checkpoint"})

_PATH_NAME = re.compile(r"(^|_)(path|paths|dir|folder|file|logdir|config|model|adapters?)($|_)")
_PATH_HELP = re.compile(r"\b(path|paths|directory|folder|file|files)\b", re.IGNORECASE)
# Keys whose value may list several paths with commas (LLaMA-Factory splits on ",").
COMMA_LISTS = frozenset({"adapter_name_or_path", "ref_model_adapters", "reward_model_adapters", "export_quantization_dataset"})
VALUE_SHOWN_CHARS = 200


def path_like(name: str, kinds: Iterable[str], help_text: str) -> bool:
    """Whether a key of LLaMA-Factory's catalogue may name a path: it takes text, and its name
    or its help says path, folder, directory or file."""
    return bool({"str", "any"} & set(kinds)) and bool(_PATH_NAME.search(name) or _PATH_HELP.search(help_text or ""))


def use_of(name: str) -> Use | None:
    """What the trainer does with the path key `name`: "writes", "reads", or None for a key
    that names no path. A key the catalogue shows path-like but no list above has is read."""
    if name in WRITES:
        return "writes"
    if name in READS:
        return "reads"
    if name in NOT_PATHS or name in FORM_OR_OWNED:
        return None
    from backend.llama_factory.keys import key_catalogue  # the catalogue is standard-library only

    spec = key_catalogue().get(name)
    if spec is not None and path_like(spec.name, spec.kinds, spec.help):
        return "reads"
    return None


@dataclass(frozen=True)
class ReadPlaces:
    """Where a key that reads may point: the data roots, the runs folder and the model folder,
    each as the OS resolves it."""

    roots: tuple[Path, ...]

    @classmethod
    def of(cls, roots: Sequence[Path | str], model_dir: Path | str | None = None) -> ReadPlaces:
        found: list[Path] = []
        for root in [*roots, *([model_dir] if model_dir else [])]:
            try:
                real = Path(os.path.realpath(os.path.expanduser(str(root))))
            except (OSError, ValueError):
                continue
            if real not in found:
                found.append(real)
        return cls(tuple(found))

    def shown(self) -> str:
        return ", ".join(str(root) for root in self.roots)

    def holds(self, path: Path) -> bool:
        return any(path == root or path.is_relative_to(root) for root in self.roots)


@dataclass(frozen=True)
class PathRefusal:
    """Why a path key's value is refused: a message id of `check.*` and its parameters."""

    message: str
    params: dict[str, Any]


def _shown(value: str) -> str:
    return repr(value if len(value) <= VALUE_SHOWN_CHARS else value[: VALUE_SHOWN_CHARS - 1] + "…")


def _escapes(relative: str) -> bool:
    return ".." in Path(relative).parts


def _is_relative(raw: str) -> bool:
    return not raw.startswith(("/", "~"))


def written_path_refusal(name: str, raw: str) -> PathRefusal | None:
    """A refusal when a key that writes points anywhere but inside the run, else None."""
    problem = path_problem(raw)
    if problem:
        return PathRefusal("path-key-unusable", {"name": name, "path": _shown(raw)})
    if not raw.strip() or not _is_relative(raw) or _escapes(raw):
        return PathRefusal("path-key-writes-outside", {"name": name, "path": _shown(raw), "inside": name.removesuffix("_dir").removesuffix("_path") or "data"})
    return None


def read_path_refusal(name: str, raw: str, places: ReadPlaces) -> PathRefusal | None:
    """A refusal when a key that reads points outside the run, the data roots, the runs folder
    and the model folder (or through a link that leads out of them), else None. Nothing is
    opened: whether a file outside exists is never told."""
    problem = path_problem(raw)
    if problem:
        return PathRefusal("path-key-unusable", {"name": name, "path": _shown(raw)})
    parts = [raw] + ([part.strip() for part in raw.split(",") if part.strip()] if name in COMMA_LISTS and "," in raw else [])
    for part in parts:
        if _is_relative(part):
            if _escapes(part):
                return PathRefusal("path-key-reads-outside", {"name": name, "path": _shown(part), "roots": places.shown()})
            continue  # inside the run (the trainer's working directory), or a hub id
        expanded = os.path.expanduser(part)
        literal = Path(os.path.normpath(expanded))
        if not places.holds(literal):
            return PathRefusal("path-key-reads-outside", {"name": name, "path": _shown(part), "roots": places.shown()})
        if not places.holds(Path(os.path.realpath(expanded))):
            return PathRefusal("path-key-reads-link-outside", {"name": name, "path": _shown(part), "roots": places.shown()})
    return None


def path_value_refusal(name: str, value: Any, places: ReadPlaces) -> PathRefusal | None:
    """The rule of key `name` applied to its value (a mapping or a number names no path)."""
    if not isinstance(value, str):
        return None
    use = use_of(name)
    if use == "writes":
        return written_path_refusal(name, value)
    if use == "reads":
        if value.lstrip().startswith("{"):
            return None  # JSON text (accelerator_config, fsdp_config take it too): no file
        return read_path_refusal(name, value, places)
    return None


__all__ = [
    "COMMA_LISTS",
    "FORM_OR_OWNED",
    "NOT_PATHS",
    "READS",
    "WRITES",
    "PathRefusal",
    "ReadPlaces",
    "path_like",
    "path_value_refusal",
    "read_path_refusal",
    "use_of",
    "written_path_refusal",
]
