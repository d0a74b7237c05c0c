"""Importing a LLaMA-Factory training YAML: form values, findings, and mechanical fixes.

People bring YAML written by hand, copied from LlamaBoard's preview, or from CUDA guides.
The file is read the way `llamafactory-cli train` reads it (safe YAML, plus OmegaConf's
float rule so `1e-4` is a number), then checked twice:
- YAML rules (this module): keys that do not exist or mean something else, values YAML
  reads differently than people think (`flash_attn: off` is false), typos of real keys;
- config rules (backend/config/checks.py) over the form values the file sets, with their findings
  renamed to the YAML's keys.
A finding whose fix is mechanical carries a `patch` (keys to set; None = remove);
`apply_fixes` applies them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from backend.config import parse_form, schema
from backend.config.checks import check_config, read_places
from backend.config.presets import HardwarePreset
from backend.config.yaml_lines import apply_patch, patch_yaml_text, typed_text
from backend.config.yaml_reader import (  # noqa: F401 (the import's reader, re-exported)
    FILE_KEY,
    MAX_NESTED_VALUES,
    MAX_NESTING,
    _LlamaFactoryLoader,
    load_yaml_text,
)
from backend.findings import Finding
from backend.llama_factory.check import did_you_mean, static_names

# Unknown keys examined one by one (a "did you mean" each costs ~1 ms); the rest are
# reported together, so a file of thousands of misspelled keys costs no more than 50.
MAX_UNKNOWN_KEYS_LISTED = 50
KEY_SHOWN_CHARS = 64  # a key longer than any real one is shown cut, and never spell-checked

# Form field -> the LLaMA-Factory key a finding about it is shown under (backend/config/schema.py;
# the functions below read the schema at call time).
FORM_TO_YAML: dict[str, str] = schema.form_to_yaml()
PRECISION_KEYS = schema.PRECISION_KEYS
# Keys RocBoard writes itself (backend/config/__init__.py to_llamafactory_args) or that do not change
# what is trained: importing them loses nothing.
WRITTEN_BY_ROCBOARD = frozenset(
    {
        "do_train", "output_dir", "plot_loss", "overwrite_output_dir",
        "quantization_method", "trust_remote_code",
        "use_cpu", "overwrite_cache", "preprocessing_num_workers", "dataloader_num_workers",
        "logging_dir", "save_total_limit", "save_only_model", "ddp_timeout", "resume_from_checkpoint",
        "include_num_input_tokens_seen",
    }
)
# What LLaMA-Factory accepts: the form's choices and those only it knows (backend/config/schema.py).
FLASH_ATTN_CHOICES = schema.field("flash_attn").all_choices
FLASH_ATTN_ALIASES = {
    "eager": "disabled", "none": "disabled", "off": "disabled", "false": "disabled",
    "flash_attention_2": "fa2", "flash_attn2": "fa2", "fa": "fa2", "flash_attention_3": "fa3", "true": "auto", "on": "auto",
}
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


# --- reading: backend/config/yaml_reader.py (LLaMA-Factory's YAML typing, bounded) ------------


# --- form values ------------------------------------------------------------------------


def form_values_from_args(args: dict[str, Any]) -> dict[str, Any]:
    """The form fields a LLaMA-Factory mapping sets (values as given; parse_form judges
    them); each field's codec in backend/config/schema.py says which keys it reads and how."""
    values: dict[str, Any] = {}
    for form_field in schema.run_fields():
        if form_field.yaml is None:
            continue
        value = form_field.yaml.read(args)
        if value is not schema.ABSENT:
            values[form_field.name] = value
    return values


def to_yaml_key(form_field: str) -> str:
    return schema.form_to_yaml().get(form_field, form_field)


def yaml_patch(form_patch: dict[str, Any]) -> dict[str, Any]:
    """A patch in form fields, rewritten in YAML keys."""
    codecs = {f.name: f.yaml for f in schema.run_fields() if f.yaml is not None}
    patch: dict[str, Any] = {}
    for form_field, value in form_patch.items():
        if form_field in codecs:
            patch.update(codecs[form_field].patch(value))
        else:
            patch[form_field] = value
    return patch


def _in_yaml_terms(finding: Finding) -> Finding:
    key, patch = to_yaml_key(finding.key), yaml_patch(finding.patch)
    if finding.params is None:  # a finding still built from English sentences
        return replace(finding, key=key, patch=patch)
    # Built afresh: its texts fill `{key}` with the YAML key, in every locale alike.
    return Finding.of(key, finding.rule, message=finding.message, severity=finding.severity, patch=patch, **finding.params)


# --- YAML rules -------------------------------------------------------------------------

YamlRule = Callable[[dict[str, Any], HardwarePreset | None], list[Finding]]


def rule_disable_flash_attn(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if "disable_flash_attn" not in args:
        return []
    wanted = args["disable_flash_attn"] is True
    return [
        Finding.of(
            "disable_flash_attn",
            "yaml-disable-flash-attn",
            message="" if wanted else "yaml-disable-flash-attn-remove",
            patch={"disable_flash_attn": None, "flash_attn": "disabled"} if wanted else {"disable_flash_attn": None},
        )
    ]


def _precision_on(preset: HardwarePreset | None) -> str:
    """The precision a run trains best in on `preset`: bf16 where it has bf16 (or no preset
    is named), fp16 on a GPU without it, fp32 on the CPU."""
    if preset is None or preset.bf16:
        return "bf16"
    return "fp32" if preset.use_cpu else "fp16"


def _precision_patch(precision: str) -> dict[str, Any]:
    """The precision keys that say `precision` (fp32: none of them)."""
    return {"bf16": True if precision == "bf16" else None, "fp16": True if precision == "fp16" else None}


def rule_compute_type(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    """LlamaBoard's `compute_type` in a YAML. Its fix writes the precision it asks for, or,
    on a preset without bf16, the one that preset trains in, and says which: the fix is never
    undone by the next round's bf16 check (fix_yaml_text)."""
    if "compute_type" not in args:
        return []
    value = str(args["compute_type"]).lower()
    if any(key in args for key in PRECISION_KEYS):
        # The file says its precision with the real keys too; compute_type is only in the way.
        return [
            Finding.of("compute_type", "yaml-compute-type", patch={"compute_type": None})
        ]
    best = _precision_on(preset)
    named: dict[str, Any] = {"preset": preset.label} if preset is not None else {}
    if value in ("bf16", "pure_bf16") and best != "bf16":
        # Asked for bf16 on hardware without it: the fix says (and writes) what it trains in.
        message = "yaml-compute-type-bf16-fp32" if best == "fp32" else "yaml-compute-type-bf16-fallback"
        patch = {"compute_type": None, "pure_bf16": None, **_precision_patch(best)}
        return [Finding.of("compute_type", "yaml-compute-type", message=message, patch=patch, precision=best, **named)]
    if value not in ("bf16", "fp16", "fp32", "pure_bf16"):
        # A value LlamaBoard never wrote: the precision this preset trains best in.
        message = "yaml-compute-type-other-fp32" if best == "fp32" else "yaml-compute-type-other"
        patch = {"compute_type": None, **_precision_patch(best)}
        return [Finding.of("compute_type", "yaml-compute-type", message=message, patch=patch, precision=best, **named)]
    patches: dict[str, dict[str, Any]] = {
        "bf16": {"compute_type": None, "bf16": True, "fp16": None},
        "fp16": {"compute_type": None, "fp16": True, "bf16": None},
        "fp32": {"compute_type": None, "bf16": None, "fp16": None},
        "pure_bf16": {"compute_type": None, "pure_bf16": True, "bf16": True, "fp16": None},
    }
    messages = {"bf16": "yaml-compute-type-bf16", "fp16": "yaml-compute-type-fp16", "fp32": "yaml-compute-type-fp32", "pure_bf16": "yaml-compute-type-pure-bf16"}
    return [
        Finding.of("compute_type", "yaml-compute-type", message=messages[value], patch=patches[value])
    ]


def rule_compute_device(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if "compute_device" not in args:
        return []
    return [
        Finding.of("compute_device", "yaml-compute-device", patch={"compute_device": None})
    ]


def rule_ddp_backend(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    value = args.get("ddp_backend")
    if value is None or value in DDP_BACKENDS:
        return []
    target = DDP_BACKEND_ALIASES.get(str(value).lower())
    return [
        Finding.of("ddp_backend", "yaml-ddp-backend", patch={"ddp_backend": target or "nccl"}, value=repr(value))
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
            Finding.of(
                "flash_attn",
                "yaml-flash-attn-boolean",
                patch={"flash_attn": meaning},
                written="off/false/no" if value is False else "on/true/yes",
                boolean=str(value).lower(),
                value=meaning,
                choices=", ".join(FLASH_ATTN_CHOICES),
            )
        ]
    target = FLASH_ATTN_ALIASES.get(str(value).lower())
    return [
        Finding.of(
            "flash_attn",
            "yaml-flash-attn-choice",
            message="" if target else "yaml-flash-attn-choice-pick",
            patch={"flash_attn": target} if target else {},
            value=repr(value),
            choices=", ".join(FLASH_ATTN_CHOICES),
            target=target or "",
        )
    ]


def rule_device_map(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    findings = []
    if "device_map" in args:
        findings.append(
            Finding.of("device_map", "yaml-device-map", patch={"device_map": None})
        )
    if args.get("quantization_device_map") is not None:
        findings.append(
            Finding.of("quantization_device_map", "yaml-quantization-device-map", patch={"quantization_device_map": None})
        )
    return findings


def rule_bf16_and_fp16(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if not (args.get("bf16") is True and args.get("fp16") is True):
        return []
    keep = "fp16" if preset is not None and not preset.bf16 else "bf16"
    drop = "bf16" if keep == "fp16" else "fp16"
    if preset is None:
        return [Finding.of("bf16", "yaml-bf16-and-fp16", patch={drop: None}, keep=keep)]
    message = "yaml-bf16-and-fp16-has-bf16" if keep == "bf16" else "yaml-bf16-and-fp16-no-bf16"
    return [Finding.of("bf16", "yaml-bf16-and-fp16", message=message, patch={drop: None}, keep=keep, preset=preset.label)]


def rule_precision_unset(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    # compute_type's own finding writes the precision (its fix would be contradicted here).
    if any(key in args for key in PRECISION_KEYS) or "compute_type" in args:
        return []
    best = _precision_on(preset)
    if best == "fp32":  # the CPU: fp32 is what it trains in
        return []
    return [
        Finding.of("bf16", "yaml-precision-unset", severity="warning", patch={best: True}, precision=best)
    ]


def rule_finetuning_type(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    """`finetuning_type: qlora` is LoRA on a quantized model. On a preset that does not offer
    those bits (the CPU: none), the fix is plain LoRA, and says so: writing the bits would
    only make the next check take them out again."""
    value = args.get("finetuning_type")
    if not isinstance(value, str) or value.lower() != "qlora":
        return []
    bits = args.get("quantization_bit") or 4
    if preset is not None and (preset.use_cpu or bits not in preset.qlora_bits):
        return [
            Finding.of(
                "finetuning_type",
                "yaml-finetuning-qlora",
                message="yaml-finetuning-qlora-not-offered",
                patch={"finetuning_type": "lora", "quantization_bit": None},
                bits=bits,
                preset=preset.label,
            )
        ]
    return [
        Finding.of(
            "finetuning_type",
            "yaml-finetuning-qlora",
            patch={"finetuning_type": "lora", "quantization_bit": bits},
            bits=bits,
        )
    ]


def rule_do_train(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if args.get("do_train") is True:
        return []
    return [
        Finding.of("do_train", "yaml-do-train", patch={"do_train": True})
    ]


def rule_stage(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    """The form runs every stage it offers (schema.STAGES); an imported one is read into its
    field. ppo is LLaMA-Factory's but needs a reward model the form has no field for: a
    warning (a run from the form would train its default). Any other value is no stage at all:
    a problem. The rule keeps its old name, yaml-stage-not-sft, for a stage the form does not run."""
    from backend.config import shown  # a hostile file's value is shown short

    stage = args.get("stage", "sft")
    form_field = schema.field("stage")
    if isinstance(stage, str) and stage in form_field.choices:
        return []
    if isinstance(stage, str) and stage in form_field.llamafactory_choices:
        return [Finding.of("stage", "yaml-stage-not-sft", message="yaml-stage-ppo", stage=shown(stage), default=form_field.default)]
    return [
        Finding.of("stage", "yaml-stage-not-sft", stage=shown(stage), stages=", ".join(form_field.all_choices))
    ]


def rule_template_unset(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if args.get("template"):
        return []
    return [
        Finding.of("template", "yaml-template-unset", severity="warning")
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
        name = _key_shown(key)
        if guess and guess not in args:
            finding = Finding.of(key, "yaml-unknown-key", patch={key: None, guess: value}, name=name, guess=guess)
        elif guess:
            finding = Finding.of(key, "yaml-unknown-key", message="yaml-unknown-key-already-set", patch={key: None}, name=name, guess=guess)
        else:
            finding = Finding.of(key, "yaml-unknown-key", message="yaml-unknown-key-remove", patch={key: None}, name=name)
        findings.append(finding)
    rest = unknown[MAX_UNKNOWN_KEYS_LISTED:]
    if rest:
        findings.append(
            Finding.of(FILE_KEY, "yaml-unknown-keys-more", patch={key: None for key in rest}, count=len(rest), listed=MAX_UNKNOWN_KEYS_LISTED)
        )
    return findings


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
    # A known key the form has no field for is no finding: it is kept in Other keys
    # (backend/config/other_keys.py) and written to the run's YAML.
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
    read_roots: Sequence[Path] | None = None,
) -> ImportResult:
    """Read a LLaMA-Factory training YAML into form values and findings (problems first).
    `read_roots`: where a path of its Other keys may be read (backend/config/path_keys.py)."""
    args, findings = load_yaml_text(text, max_bytes)
    if args is None:
        return ImportResult({}, findings, {})
    findings += yaml_findings(args, preset)
    form_values = form_values_from_args(args)
    preset_env = preset.env if preset is not None else ()
    use_cpu = preset.use_cpu if preset is not None else False
    merged = {**schema.form_defaults(), **form_values, **({"preset": preset.id} if preset is not None else {})}
    config, form_findings = parse_form(merged, preset_env, use_cpu)
    # Values the form cannot hold are left out of form_values (their findings say why).
    for finding in form_findings:
        if finding.key != "other_keys":  # Other keys keeps every line: its findings name the bad ones
            form_values.pop(finding.key, None)
    form_findings = [_form_only_choice(f, form_values_from_args(args)) for f in form_findings]
    from backend.config.other_keys import deepspeed_findings

    checked = check_config(config, preset, offline=offline, bnb_available=bnb_available, read_roots=read_roots)
    checked += deepspeed_findings(config, None, use_cpu, read_places(config, read_roots))
    config_findings = [_in_yaml_terms(f) for f in form_findings + checked]
    # The YAML rules are the more specific: one finding per key, theirs first.
    flagged = {f.key for f in findings}
    findings += [f for f in config_findings if f.key not in flagged]
    findings.sort(key=lambda f: f.severity != "problem")
    return ImportResult(form_values, findings, args)


# Values LLaMA-Factory accepts that the form has no choice for (backend/config/schema.py).
def llamafactory_only_choices() -> dict[str, frozenset[Any]]:
    return {f.name: frozenset(f.llamafactory_choices) for f in schema.run_fields() if f.llamafactory_choices}


def _form_only_choice(finding: Finding, values: dict[str, Any]) -> Finding:
    """A value that is valid for LLaMA-Factory but not offered by the form is a warning."""
    value = values.get(finding.key)
    if finding.rule == "bad-choice" and value in llamafactory_only_choices().get(finding.key, ()):
        return Finding.of(finding.key, "yaml-form-has-no-choice", severity="warning", value=repr(value), name=finding.key)
    return finding


# --- into the form ----------------------------------------------------------------------


@dataclass(frozen=True)
class FormLoad:
    """What "Load into the form" does to every field of the page, field by field.

    A YAML is a whole training config: a run field it does not set takes the preset's
    default (what the YAML would train with), never the old form's value. Fields that are
    not LLaMA-Factory keys (the preset, the multi-GPU plan) stay as the form has them."""

    values: dict[str, Any]  # every page field's value after the load (kept ones: the form's own)
    set_fields: tuple[str, ...]  # run fields whose value came from the YAML
    reset_fields: tuple[str, ...]  # run fields the YAML does not set (or sets to a refused value): defaults
    kept_fields: tuple[str, ...]  # page fields that are no LLaMA-Factory key: left as they were
    findings: list[Finding]  # the import's findings

    @property
    def loaded(self) -> bool:
        """False when the YAML could not be read: nothing on the form changes."""
        return bool(self.set_fields)

    @property
    def other_keys(self) -> tuple[str, ...]:
        """The YAML's keys that no field of the form holds, kept in Other keys, in order."""
        if "other_keys" not in self.set_fields:
            return ()
        args, _ = load_yaml_text(str(self.values.get("other_keys") or ""))
        return tuple(str(key) for key in args) if args else ()


def form_load(result: ImportResult, defaults: Mapping[str, Any], current: Mapping[str, Any]) -> FormLoad:
    """The form after loading an imported YAML over `current`: the YAML's values, `defaults`
    (the preset's form values over the schema's) for the run fields it does not set, and
    `current` for the fields that are not LLaMA-Factory keys. An unreadable YAML changes nothing."""
    fields = schema.page_fields()
    base = {**schema.form_defaults(), **schema.side_form_defaults()}
    values: dict[str, Any] = {}
    set_fields: list[str] = []
    reset_fields: list[str] = []
    kept_fields: list[str] = []
    for page_field in fields:
        name = page_field.name
        if page_field.yaml is None or not result.args:
            kept_fields.append(name)
            values[name] = current.get(name, base.get(name, page_field.default))
        elif name in result.form_values:
            set_fields.append(name)
            values[name] = result.form_values[name]
        else:
            reset_fields.append(name)
            values[name] = defaults.get(name, base.get(name, page_field.default))
    # No max_steps in a LLaMA-Factory YAML means "train num_train_epochs": the form's 0.
    if "max_steps" in reset_fields:
        values["max_steps"] = 0
    return FormLoad(values, tuple(set_fields), tuple(reset_fields), tuple(kept_fields), list(result.findings))


def apply_fixes(args: dict[str, Any], findings: list[Finding]) -> dict[str, Any]:
    """`args` with every finding's patch applied, in order (None removes a key)."""
    result = dict(args)
    for finding in findings:
        result = apply_patch(result, finding.patch)
    return result


def dump_yaml(args: dict[str, Any]) -> str:
    """The YAML text of a mapping, in its order."""
    return yaml.safe_dump(json.loads(json.dumps(args, default=str)), sort_keys=False, allow_unicode=True)


# --- fixing the text: the page's "Apply fixes" and `app.py check --fix` -------------------
#
# One function for both, so the same file gives the same fixed file everywhere. The fixes
# are written into the text itself, line by line, so that the file's comments, blank lines
# and order survive (the line patcher: backend/config/yaml_lines.py); whatever it cannot vouch for is rewritten whole by
# `dump_yaml` (comments lost, and the result says so).

FIX_ROUNDS = 4  # one fix can uncover the next (bf16 and fp16 -> bf16 on a card without it)


@dataclass(frozen=True)
class FixResult:
    """A YAML text with every mechanical fix applied (rounds of them: a fix can uncover the
    next), what is still wrong with it, and whether its comments survived.

    Unpacks as `(text, result)`, what `fix_yaml` returned before it had more to say."""

    text: str  # the fixed YAML (the input unchanged when nothing was fixable or it is unreadable)
    result: ImportResult  # the import of `text`: what is left
    applied: list[Finding]  # the findings whose patches were applied, every round's, in order
    comments_kept: bool  # False: the text was rewritten whole, its comments and layout lost
    original: ImportResult  # the import of the text as given

    @property
    def count(self) -> int:
        return len(self.applied)

    @property
    def message_id(self) -> str:
        """The note to show beside the fixed text ("" when there is nothing to say)."""
        return "" if self.comments_kept else "import.comments_lost"

    def __iter__(self) -> Iterator[Any]:  # fixed, result = board.fix_yaml(...)
        return iter((self.text, self.result))


def fix_yaml_text(
    text: str,
    preset: HardwarePreset | None = None,
    *,
    offline: bool = True,
    rounds: int = FIX_ROUNDS,
    bnb_available: Callable[[], bool] | None = None,
    read_roots: Sequence[Path] | None = None,
) -> FixResult:
    """`text` with every mechanical fix applied, up to `rounds` rounds (each re-imports the
    text and applies what it finds), comments kept where the line patcher can.

    Whatever is written parses (as llamafactory-cli reads it) to exactly
    `apply_fixes(args, findings)` of each round: a patched text that would not is replaced
    by `dump_yaml` of that mapping and `comments_kept` is False."""
    original = import_yaml(text, preset, offline=offline, bnb_available=bnb_available, read_roots=read_roots)
    result, fixed, applied, kept = original, text, [], True
    if not original.args:
        return FixResult(text, original, [], True, original)
    claims: dict[str, Any] = {}  # what the fixes applied so far said of each key they wrote
    for _ in range(rounds):
        chosen, claims = fixes_that_keep(result.findings, result.args, claims)
        if not chosen:
            break
        target = apply_fixes(result.args, chosen)
        if typed_text(target) == typed_text(result.args):
            break  # the patches change nothing: another round would not either
        patched = patch_yaml_text(fixed, result.args, chosen)
        if patched is None:
            patched, kept = dump_yaml(target), False
        applied += chosen
        fixed = patched
        result = import_yaml(fixed, preset, offline=offline, bnb_available=bnb_available, read_roots=read_roots)
    return FixResult(fixed, result, applied, kept, original)


_PRESENT = object()  # a claim that a key is there, whatever its value (a typo renamed)
RENAMING_RULES = frozenset({"yaml-unknown-key"})  # their fix moves a value to the key's right name


def fixes_that_keep(findings: list[Finding], args: dict[str, Any], claims: Mapping[str, Any] | None = None) -> tuple[list[Finding], dict[str, Any]]:
    """The fixable findings, in order, that take back nothing a fix before them wrote, and
    what they all say of the keys they write (`claims`, from earlier rounds, extended).

    What a finding says its fix does is what the fixed file holds: a later fix that would
    undo it (bf16 written for `compute_type: bf16`, then taken out for a card without bf16)
    is left for the person, listed with what is still wrong. A renamed key (a typo's fix: the
    same value under the right name) only says the key is there: a later fix of its value
    keeps that true."""
    said = dict(claims or {})
    chosen = []
    for finding in findings:
        if not finding.patch:
            continue
        removed = [typed_text(args[key]) for key, value in finding.patch.items() if value is None and key in args]
        renamed = finding.rule in RENAMING_RULES
        new = {key: _PRESENT if renamed and value is not None and typed_text(value) in removed else value for key, value in finding.patch.items()}
        if any(key in said and not _agrees(said[key], value) for key, value in new.items()):
            continue
        chosen.append(finding)
        for key, value in new.items():
            if key not in said or said[key] is _PRESENT:
                said[key] = value
    return chosen, said


def _agrees(said: Any, value: Any) -> bool:
    if said is _PRESENT or value is _PRESENT:
        return (said is None) == (value is None)
    return typed_text(said) == typed_text(value)


__all__ = [
    "FORM_TO_YAML",
    "YAML_RULES",
    "FixResult",
    "FormLoad",
    "ImportResult",
    "apply_fixes",
    "dump_yaml",
    "fix_yaml_text",
    "form_load",
    "form_values_from_args",
    "import_yaml",
    "load_yaml_text",
    "to_yaml_key",
    "yaml_findings",
    "yaml_patch",
]
