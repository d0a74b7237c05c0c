"""Importing a LLaMA-Factory training YAML: form values, findings, and mechanical fixes.

People bring YAML written by hand, copied from LlamaBoard's preview, or from CUDA guides.
The file is read the way `llamafactory-cli train` reads it (safe YAML, plus OmegaConf's
float rule so `1e-4` is a number), then checked twice:
- YAML rules (this module): keys that do not exist or mean something else, values YAML
  reads differently than people think (`flash_attn: off` is false), typos of real keys;
- config rules (backend/checks.py) over the form values the file sets, with their findings
  renamed to the YAML's keys.
A finding whose fix is mechanical carries a `patch` (keys to set; None = remove);
`apply_fixes` applies them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from backend.checks import check_config
from backend.config import FORM_DEFAULTS, parse_form, shown
from backend.findings import Finding
from backend.lf_check import did_you_mean, static_names
from backend.presets import HardwarePreset

MAX_NESTED_VALUES = 10_000  # a training config has ~50 scalars; aliases can make millions
# A training config nests a list one level down; PyYAML builds nested values recursively,
# so a 50,000-deep list would exhaust the stack: refused before and while parsing.
MAX_NESTING = 32
# Unknown keys examined one by one (a "did you mean" each costs ~1 ms); the rest are
# reported together, so a file of thousands of misspelled keys costs no more than 50.
MAX_UNKNOWN_KEYS_LISTED = 50
KEY_SHOWN_CHARS = 64  # a key longer than any real one is shown cut, and never spell-checked
FILE_KEY = "file"  # findings about the file as a whole

# Form field -> the LLaMA-Factory key that holds it. `precision` and `gradient_checkpointing`
# are spread over or inverted into other keys (see form_values_from_args and yaml_patch).
FORM_TO_YAML: dict[str, str] = {
    "model_path": "model_name_or_path",
    "template": "template",
    "dataset_dir": "dataset_dir",
    "dataset": "dataset",
    "finetuning_type": "finetuning_type",
    "lora_rank": "lora_rank",
    "lora_alpha": "lora_alpha",
    "lora_dropout": "lora_dropout",
    "lora_target": "lora_target",
    "quantization_bit": "quantization_bit",
    "learning_rate": "learning_rate",
    "num_train_epochs": "num_train_epochs",
    "max_steps": "max_steps",
    "batch_size": "per_device_train_batch_size",
    "grad_accum": "gradient_accumulation_steps",
    "cutoff_len": "cutoff_len",
    "precision": "bf16",
    "flash_attn": "flash_attn",
    "gradient_checkpointing": "disable_gradient_checkpointing",
    "logging_steps": "logging_steps",
    "save_steps": "save_steps",
    "run_name": "run_name",
}
PRECISION_KEYS = ("bf16", "fp16", "pure_bf16")
# Keys RocBoard writes itself (backend/config.py to_llamafactory_args) or that do not change
# what is trained: importing them loses nothing.
WRITTEN_BY_ROCBOARD = frozenset(
    {
        "stage", "do_train", "output_dir", "plot_loss", "overwrite_output_dir", "report_to",
        "lr_scheduler_type", "warmup_ratio", "seed", "quantization_method", "trust_remote_code",
        "use_cpu", "max_samples", "overwrite_cache", "preprocessing_num_workers", "dataloader_num_workers",
        "logging_dir", "save_total_limit", "save_only_model", "ddp_timeout", "resume_from_checkpoint",
        "include_num_input_tokens_seen",
    }
)
FLASH_ATTN_CHOICES = ("auto", "disabled", "sdpa", "fa2", "fa3")
FLASH_ATTN_ALIASES = {"eager": "disabled", "none": "disabled", "off": "disabled", "false": "disabled", "flash_attention_2": "fa2", "flash_attn2": "fa2", "fa": "fa2", "flash_attention_3": "fa3", "true": "auto", "on": "auto"}
DDP_BACKENDS = ("nccl", "gloo", "mpi", "xccl", "hccl", "cncl", "mccl")
# On ROCm, torch.distributed's "nccl" backend is RCCL; these are what people write instead.
DDP_BACKEND_ALIASES = {"pytorch": "nccl", "torch": "nccl", "rccl": "nccl", "hip": "nccl", "rocm": "nccl", "cuda": "nccl"}
HUB_LIKE_VALUE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ImportResult:
    form_values: dict[str, Any]  # form fields (keys of FORM_DEFAULTS) the YAML sets, with valid values
    findings: list[Finding]  # problems first; each `patch` speaks in YAML keys
    args: dict[str, Any] = field(default_factory=dict)  # the parsed mapping, as read

    @property
    def fixable(self) -> list[Finding]:
        return [f for f in self.findings if f.patch]


# --- reading ----------------------------------------------------------------------------


class _LlamaFactoryLoader(yaml.SafeLoader):
    """yaml.SafeLoader as OmegaConf (what llamafactory-cli uses) configures it: `1e-4` is a
    float, dates stay strings; duplicate keys are recorded instead of silently overwritten."""

    duplicates: list[str]

    def construct_yaml_int(self, node):  # type: ignore[override]
        # int() of more than 4,300 digits raises ValueError (Python 3.11's limit) and far
        # fewer are already outside every range: such a number stays its text, which
        # parse_form refuses with a range finding naming the key.
        digits = str(node.value).lstrip("+-").replace("_", "")
        if digits.isdigit() and len(digits) > 30:
            return str(node.value)
        return super().construct_yaml_int(node)

    def construct_mapping(self, node, deep=False):  # type: ignore[override]
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
    return Finding(
        FILE_KEY,
        f"The file nests values more than {MAX_NESTING} levels deep.",
        "A training YAML holds plain `key: value` lines (a list at most one level down).",
        rule="yaml-too-deep",
    )


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
        return None, [Finding(FILE_KEY, f"The file is {size:,} bytes; a training config is a few kB (limit {max_bytes:,}).", "Import the training YAML itself, not a dataset or a log.", rule="yaml-too-large")]
    if not text.strip():
        return None, [Finding(FILE_KEY, "The file is empty.", "Paste or pick a LLaMA-Factory training YAML.", rule="yaml-empty")]
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
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        what = getattr(error, "problem", None) or str(error).splitlines()[0]
        return None, [Finding(FILE_KEY, f"This is not valid YAML{at}: {what}.", "Fix the syntax there (indent with spaces, `key: value` on each line).", rule="yaml-syntax")]
    except RecursionError:  # block nesting ("- - - - x", deep indentation) the scan cannot see
        return None, [_too_deep()]
    except (ValueError, OverflowError, TypeError) as error:  # a constructor's own refusal of a value
        what = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        return None, [Finding(FILE_KEY, f"This is not valid YAML: {what}.", "Fix the syntax there (indent with spaces, `key: value` on each line).", rule="yaml-syntax")]
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single {type(data).__name__} value"
        return None, [Finding(FILE_KEY, f"The file holds {kind}, not a mapping of keys to values.", "A training YAML has one `key: value` per line, e.g. `learning_rate: 1.0e-4`.", rule="yaml-not-mapping")]
    findings = [
        Finding(key, f"`{key}` appears more than once; llamafactory-cli refuses the file.", f"Keep one `{key}` line.", rule="yaml-duplicate-key")
        for key in dict.fromkeys(loader.duplicates)
    ]
    bad_keys = [k for k in data if not isinstance(k, str)]
    for key in bad_keys:
        findings.append(Finding(shown(key), f"Key {shown(key)} is not a name.", "Keys are LLaMA-Factory argument names such as learning_rate.", rule="yaml-key-not-text", patch={}))
    count, depth = _count_values(data, MAX_NESTED_VALUES)
    if count > MAX_NESTED_VALUES:
        return None, [Finding(FILE_KEY, "The file expands to too many values (YAML anchors or deep nesting).", "A training YAML holds plain `key: value` lines; remove the anchors (&name / *name).", rule="yaml-too-many-values")]
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


# --- form values ------------------------------------------------------------------------


def form_values_from_args(args: dict[str, Any]) -> dict[str, Any]:
    """The form fields a LLaMA-Factory mapping sets (values as given; parse_form judges them)."""
    values: dict[str, Any] = {}
    for form_field, key in FORM_TO_YAML.items():
        if key not in args or form_field in ("precision", "gradient_checkpointing"):
            continue
        value = args[key]
        if form_field in ("dataset", "lora_target") and isinstance(value, list):
            value = ",".join(map(str, value))
        elif form_field == "quantization_bit":
            value = "none" if value is None else str(value)
        elif form_field == "max_steps" and isinstance(value, int) and not isinstance(value, bool) and value == -1:
            value = 0  # LLaMA-Factory's -1 and the form's 0 both mean "train by epochs"
        values[form_field] = value
    # Without bf16/fp16 LLaMA-Factory trains in fp32: the form must say so too, not keep
    # its own default.
    values["precision"] = "bf16" if args.get("bf16") is True or args.get("pure_bf16") is True else "fp16" if args.get("fp16") is True else "fp32"
    if "disable_gradient_checkpointing" in args:
        values["gradient_checkpointing"] = args["disable_gradient_checkpointing"] is not True
    return values


def to_yaml_key(form_field: str) -> str:
    return FORM_TO_YAML.get(form_field, form_field)


def yaml_patch(form_patch: dict[str, Any]) -> dict[str, Any]:
    """A patch in form fields, rewritten in YAML keys."""
    patch: dict[str, Any] = {}
    for form_field, value in form_patch.items():
        if form_field == "precision":
            patch.update(bf16=True if value == "bf16" else None, fp16=True if value == "fp16" else None, pure_bf16=None)
        elif form_field == "gradient_checkpointing":
            patch["disable_gradient_checkpointing"] = None if value else True
        elif form_field == "quantization_bit":
            patch["quantization_bit"] = None if str(value) == "none" else int(value)
        elif form_field == "max_steps" and value == 0:
            patch["max_steps"] = None
        else:
            patch[to_yaml_key(form_field)] = value
    return patch


def _in_yaml_terms(finding: Finding) -> Finding:
    return replace(finding, key=to_yaml_key(finding.key), patch=yaml_patch(finding.patch))


# --- YAML rules -------------------------------------------------------------------------

YamlRule = Callable[[dict[str, Any], HardwarePreset | None], list[Finding]]


def rule_disable_flash_attn(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if "disable_flash_attn" not in args:
        return []
    wanted = args["disable_flash_attn"] is True
    return [
        Finding(
            "disable_flash_attn",
            "`disable_flash_attn` is not a LLaMA-Factory key (it was renamed); the parser refuses the file.",
            "Write `flash_attn: disabled`." if wanted else "Remove the line (`flash_attn: auto` is the default).",
            rule="yaml-disable-flash-attn",
            patch={"disable_flash_attn": None, "flash_attn": "disabled"} if wanted else {"disable_flash_attn": None},
        )
    ]


def rule_compute_type(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if "compute_type" not in args:
        return []
    value = str(args["compute_type"]).lower()
    if any(key in args for key in PRECISION_KEYS):
        # The file says its precision with the real keys too; compute_type is only in the way.
        return [
            Finding(
                "compute_type",
                "`compute_type` is a LlamaBoard form field, not a YAML key; the parser refuses the file.",
                "Remove it (bf16 / fp16 already say the precision).",
                rule="yaml-compute-type",
                patch={"compute_type": None},
            )
        ]
    patches = {
        "bf16": {"compute_type": None, "bf16": True, "fp16": None},
        "fp16": {"compute_type": None, "fp16": True, "bf16": None},
        "fp32": {"compute_type": None, "bf16": None, "fp16": None},
        "pure_bf16": {"compute_type": None, "pure_bf16": True, "bf16": True, "fp16": None},
    }
    fix = {"bf16": "Write `bf16: true`.", "fp16": "Write `fp16: true`.", "fp32": "Remove it (no bf16/fp16 key means fp32).", "pure_bf16": "Write `pure_bf16: true` and `bf16: true`."}
    return [
        Finding(
            "compute_type",
            "`compute_type` is a LlamaBoard form field, not a YAML key; the parser refuses the file.",
            fix.get(value, "Remove it and set `bf16: true` (or `fp16: true`)."),
            rule="yaml-compute-type",
            patch=patches.get(value, {"compute_type": None}),
        )
    ]


def rule_compute_device(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if "compute_device" not in args:
        return []
    return [
        Finding(
            "compute_device",
            "There is no `compute_device` key. On AMD GPUs nothing needs setting: ROCm builds of PyTorch use the `cuda` device name on their own.",
            "Remove it (to train on the CPU instead, set `use_cpu: true`).",
            rule="yaml-compute-device",
            patch={"compute_device": None},
        )
    ]


def rule_ddp_backend(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    value = args.get("ddp_backend")
    if value is None or value in DDP_BACKENDS:
        return []
    target = DDP_BACKEND_ALIASES.get(str(value).lower())
    return [
        Finding(
            "ddp_backend",
            f"ddp_backend {value!r} is not a backend. On ROCm, AMD's RCCL is used through the `nccl` backend.",
            "Write `ddp_backend: nccl`, or remove it (the default picks nccl on GPUs).",
            rule="yaml-ddp-backend",
            patch={"ddp_backend": target or "nccl"},
        )
    ]


def rule_flash_attn_value(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if "flash_attn" not in args:
        return []
    value = args["flash_attn"]
    if isinstance(value, str) and value in FLASH_ATTN_CHOICES:
        return []
    if isinstance(value, bool):
        meaning = "disabled" if value is False else "auto"
        return [
            Finding(
                "flash_attn",
                f"YAML reads `flash_attn: {'off/false/no' if value is False else 'on/true/yes'}` as the boolean {str(value).lower()}, which LLaMA-Factory does not accept.",
                f"Write `flash_attn: {meaning}` (choices: {', '.join(FLASH_ATTN_CHOICES)}).",
                rule="yaml-flash-attn-boolean",
                patch={"flash_attn": meaning},
            )
        ]
    target = FLASH_ATTN_ALIASES.get(str(value).lower())
    return [
        Finding(
            "flash_attn",
            f"flash_attn {value!r} is not one of {', '.join(FLASH_ATTN_CHOICES)}.",
            f"Write `flash_attn: {target}`." if target else f"Pick one of {', '.join(FLASH_ATTN_CHOICES)}.",
            rule="yaml-flash-attn-choice",
            patch={"flash_attn": target} if target else {},
        )
    ]


def rule_device_map(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    findings = []
    if "device_map" in args:
        findings.append(
            Finding(
                "device_map",
                "`device_map` is not a training key: LLaMA-Factory places the model itself (one copy per GPU) and refuses the file.",
                "Remove it. To spread a large model over GPUs, use DeepSpeed ZeRO-3 (`deepspeed: ...ds_z3_config.json`).",
                rule="yaml-device-map",
                patch={"device_map": None},
            )
        )
    if args.get("quantization_device_map") is not None:
        findings.append(
            Finding(
                "quantization_device_map",
                "A device map cannot be used when training a quantized model (LLaMA-Factory refuses it).",
                "Remove quantization_device_map.",
                rule="yaml-quantization-device-map",
                patch={"quantization_device_map": None},
            )
        )
    return findings


def rule_bf16_and_fp16(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if not (args.get("bf16") is True and args.get("fp16") is True):
        return []
    keep = "fp16" if preset is not None and not preset.bf16 else "bf16"
    drop = "bf16" if keep == "fp16" else "fp16"
    return [
        Finding(
            "bf16",
            "bf16 and fp16 are both true; training runs in one precision (transformers refuses both).",
            f"Set only one of bf16 or fp16: keep `{keep}: true`" + (f" ({preset.display_name} " + ("has bf16)." if keep == "bf16" else "has no bf16).") if preset else "."),
            rule="yaml-bf16-and-fp16",
            patch={drop: None},
        )
    ]


def rule_precision_unset(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if any(key in args for key in PRECISION_KEYS):
        return []
    best = "fp16" if preset is not None and not preset.bf16 and not preset.use_cpu else "bf16"
    if preset is not None and preset.use_cpu:
        return []
    return [
        Finding(
            "bf16",
            "Neither bf16 nor fp16 is set: LLaMA-Factory trains in fp32, with twice the memory and far slower.",
            f"Set `{best}: true`.",
            severity="warning",
            rule="yaml-precision-unset",
            patch={best: True},
        )
    ]


def rule_finetuning_type(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    value = args.get("finetuning_type")
    if not isinstance(value, str) or value.lower() != "qlora":
        return []
    return [
        Finding(
            "finetuning_type",
            "`finetuning_type: qlora` does not exist: QLoRA is LoRA on a quantized model.",
            "Write `finetuning_type: lora` and `quantization_bit: 4`.",
            rule="yaml-finetuning-qlora",
            patch={"finetuning_type": "lora", "quantization_bit": args.get("quantization_bit") or 4},
        )
    ]


def rule_do_train(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if args.get("do_train") is True:
        return []
    return [
        Finding(
            "do_train",
            "do_train is not true: `llamafactory-cli train` would load everything and train nothing.",
            "Set `do_train: true`.",
            rule="yaml-do-train",
            patch={"do_train": True},
        )
    ]


def rule_stage(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    stage = args.get("stage", "sft")
    if stage == "sft":
        return []
    return [
        Finding(
            "stage",
            f"stage is {stage!r}; RocBoard's form runs supervised fine-tuning (sft) only.",
            "Set `stage: sft`, or run this file with llamafactory-cli directly.",
            severity="warning",
            rule="yaml-stage-not-sft",
        )
    ]


def rule_template_unset(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if args.get("template"):
        return []
    return [
        Finding(
            "template",
            "No template is set: LLaMA-Factory would format the examples without the model's chat markup.",
            "Set the template of the model family, e.g. `template: llama3` or `template: qwen`.",
            severity="warning",
            rule="yaml-template-unset",
        )
    ]


# Keys that have their own rule above; the unknown-key rule leaves them alone.
_KEYS_WITH_RULES = frozenset({"disable_flash_attn", "compute_type", "compute_device", "device_map"})


def _key_shown(key: str) -> str:
    return key if len(key) <= KEY_SHOWN_CHARS else key[:KEY_SHOWN_CHARS] + "…"


def rule_unknown_keys(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    known = static_names().keys
    findings = []
    unknown = [key for key in args if key not in known and key not in _KEYS_WITH_RULES]
    for key in unknown[:MAX_UNKNOWN_KEYS_LISTED]:
        value = args[key]
        guess = did_you_mean(key, known) if len(key) <= KEY_SHOWN_CHARS else None
        if guess and guess not in args:
            fix, patch = f"Did you mean `{guess}`? Rename it.", {key: None, guess: value}
        elif guess:
            fix, patch = f"Remove it (did you mean `{guess}`? That is already set).", {key: None}
        else:
            fix, patch = "Remove it.", {key: None}
        findings.append(Finding(key, f"`{_key_shown(key)}` is not a LLaMA-Factory key; its parser refuses the whole file.", fix, rule="yaml-unknown-key", patch=patch))
    rest = unknown[MAX_UNKNOWN_KEYS_LISTED:]
    if rest:
        findings.append(
            Finding(
                FILE_KEY,
                f"{len(rest)} more keys are not LLaMA-Factory keys either (the first {MAX_UNKNOWN_KEYS_LISTED} are listed one by one).",
                "Remove them: a training YAML holds a few dozen keys.",
                rule="yaml-unknown-keys-more",
                patch={key: None for key in rest},
            )
        )
    return findings


def rule_not_in_form(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    known = static_names().keys
    in_form = set(FORM_TO_YAML.values()) | set(PRECISION_KEYS)
    return [
        Finding(
            key,
            f"The form has no field for `{_key_shown(key)}`: a run started from the form goes without it.",
            "Run this file with llamafactory-cli (see Export) if you need it.",
            severity="warning",
            rule="yaml-not-in-form",
        )
        for key in args
        if key in known and key not in in_form and key not in WRITTEN_BY_ROCBOARD
    ]


YAML_RULES: tuple[YamlRule, ...] = (
    rule_disable_flash_attn,
    rule_compute_type,
    rule_compute_device,
    rule_ddp_backend,
    rule_flash_attn_value,
    rule_device_map,
    rule_bf16_and_fp16,
    rule_precision_unset,
    rule_finetuning_type,
    rule_do_train,
    rule_stage,
    rule_template_unset,
    rule_unknown_keys,
    rule_not_in_form,
)


def yaml_findings(args: dict[str, Any], preset: HardwarePreset | None = None) -> list[Finding]:
    return [finding for rule in YAML_RULES for finding in rule(args, preset)]


# --- the import -------------------------------------------------------------------------


def import_yaml(
    text: str,
    preset: HardwarePreset | None = None,
    max_bytes: int = 256_000,
    *,
    offline: bool = True,
    bnb_available: Callable[[], bool] | None = None,
) -> ImportResult:
    """Read a LLaMA-Factory training YAML into form values and findings (problems first)."""
    args, findings = load_yaml_text(text, max_bytes)
    if args is None:
        return ImportResult({}, findings, {})
    findings += yaml_findings(args, preset)
    form_values = form_values_from_args(args)
    preset_env = preset.env if preset is not None else ()
    use_cpu = preset.use_cpu if preset is not None else False
    merged = {**FORM_DEFAULTS, **form_values, **({"preset": preset.id} if preset is not None else {})}
    config, form_findings = parse_form(merged, preset_env, use_cpu)
    # Values the form cannot hold are left out of form_values (their findings say why).
    for finding in form_findings:
        form_values.pop(finding.key, None)
    form_findings = [_form_only_choice(f, form_values_from_args(args)) for f in form_findings]
    config_findings = [_in_yaml_terms(f) for f in form_findings + check_config(config, preset, offline=offline, bnb_available=bnb_available)]
    # The YAML rules are the more specific: one finding per key, theirs first.
    flagged = {f.key for f in findings}
    findings += [f for f in config_findings if f.key not in flagged]
    findings.sort(key=lambda f: f.severity != "problem")
    return ImportResult(form_values, findings, args)


# Values LLaMA-Factory accepts that the form has no choice for.
LLAMAFACTORY_ONLY_CHOICES: dict[str, frozenset[str]] = {"flash_attn": frozenset({"fa3"}), "finetuning_type": frozenset({"oft"})}


def _form_only_choice(finding: Finding, values: dict[str, Any]) -> Finding:
    """A value that is valid for LLaMA-Factory but not offered by the form is a warning."""
    value = values.get(finding.key)
    if finding.rule == "bad-choice" and value in LLAMAFACTORY_ONLY_CHOICES.get(finding.key, ()):
        return replace(
            finding,
            problem=f"The form has no choice {value!r} for {finding.key}: a run started from the form uses its default.",
            fix="Run this file with llamafactory-cli (see Export) to keep it.",
            severity="warning",
            rule="yaml-not-in-form",
        )
    return finding


def apply_fixes(args: dict[str, Any], findings: list[Finding]) -> dict[str, Any]:
    """`args` with every finding's patch applied, in order (None removes a key)."""
    result = dict(args)
    for finding in findings:
        result = _apply_patch(result, finding.patch)
    return result


def _apply_patch(args: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
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


def dump_yaml(args: dict[str, Any]) -> str:
    """The YAML text of a mapping, in its order."""
    return yaml.safe_dump(json.loads(json.dumps(args, default=str)), sort_keys=False, allow_unicode=True)


__all__ = [
    "FORM_TO_YAML",
    "YAML_RULES",
    "ImportResult",
    "apply_fixes",
    "dump_yaml",
    "form_values_from_args",
    "import_yaml",
    "load_yaml_text",
    "to_yaml_key",
    "yaml_findings",
    "yaml_patch",
]
