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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from backend.config import schema
from backend.config.checks import check_config
from backend.config import parse_form, shown
from backend.findings import Finding
from backend.llama_factory.check import did_you_mean, static_names
from backend.config.presets import HardwarePreset

MAX_NESTED_VALUES = 10_000  # a training config has ~50 scalars; aliases can make millions
# A training config nests a list one level down; PyYAML builds nested values recursively,
# so a 50,000-deep list would exhaust the stack: refused before and while parsing.
MAX_NESTING = 32
# Unknown keys examined one by one (a "did you mean" each costs ~1 ms); the rest are
# reported together, so a file of thousands of misspelled keys costs no more than 50.
MAX_UNKNOWN_KEYS_LISTED = 50
KEY_SHOWN_CHARS = 64  # a key longer than any real one is shown cut, and never spell-checked
FILE_KEY = "file"  # findings about the file as a whole

# Form field -> the LLaMA-Factory key a finding about it is shown under (backend/config/schema.py;
# the functions below read the schema at call time).
FORM_TO_YAML: dict[str, str] = schema.form_to_yaml()
PRECISION_KEYS = schema.PRECISION_KEYS
# Keys RocBoard writes itself (backend/config/__init__.py to_llamafactory_args) or that do not change
# what is trained: importing them loses nothing.
WRITTEN_BY_ROCBOARD = frozenset(
    {
        "stage", "do_train", "output_dir", "plot_loss", "overwrite_output_dir", "report_to",
        "quantization_method", "trust_remote_code",
        "use_cpu", "overwrite_cache", "preprocessing_num_workers", "dataloader_num_workers",
        "logging_dir", "save_total_limit", "save_only_model", "ddp_timeout", "resume_from_checkpoint",
        "include_num_input_tokens_seen",
    }
)
# What LLaMA-Factory accepts: the form's choices and those only it knows (backend/config/schema.py).
FLASH_ATTN_CHOICES = schema.field("flash_attn").all_choices
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
    at = {"line": line, "column": column} if line is not None else {}
    for message, pattern in _SYNTAX_AT if at else _SYNTAX_NOWHERE:
        match = pattern.fullmatch(what)
        if match is not None:
            return Finding.of(FILE_KEY, "yaml-syntax", message=message, **at, **match.groupdict())
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
        findings.append(Finding.of(shown(key), "yaml-key-not-text", patch={}))
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


def rule_compute_type(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if "compute_type" not in args:
        return []
    value = str(args["compute_type"]).lower()
    if any(key in args for key in PRECISION_KEYS):
        # The file says its precision with the real keys too; compute_type is only in the way.
        return [
            Finding.of("compute_type", "yaml-compute-type", patch={"compute_type": None})
        ]
    patches = {
        "bf16": {"compute_type": None, "bf16": True, "fp16": None},
        "fp16": {"compute_type": None, "fp16": True, "bf16": None},
        "fp32": {"compute_type": None, "bf16": None, "fp16": None},
        "pure_bf16": {"compute_type": None, "pure_bf16": True, "bf16": True, "fp16": None},
    }
    messages = {"bf16": "yaml-compute-type-bf16", "fp16": "yaml-compute-type-fp16", "fp32": "yaml-compute-type-fp32", "pure_bf16": "yaml-compute-type-pure-bf16"}
    return [
        Finding.of(
            "compute_type",
            "yaml-compute-type",
            message=messages.get(value, "yaml-compute-type-other"),
            patch=patches.get(value, {"compute_type": None}),
        )
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
    return [Finding.of("bf16", "yaml-bf16-and-fp16", message=message, patch={drop: None}, keep=keep, preset=preset.display_name)]


def rule_precision_unset(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if any(key in args for key in PRECISION_KEYS):
        return []
    best = "fp16" if preset is not None and not preset.bf16 and not preset.use_cpu else "bf16"
    if preset is not None and preset.use_cpu:
        return []
    return [
        Finding.of("bf16", "yaml-precision-unset", severity="warning", patch={best: True}, precision=best)
    ]


def rule_finetuning_type(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    value = args.get("finetuning_type")
    if not isinstance(value, str) or value.lower() != "qlora":
        return []
    return [
        Finding.of(
            "finetuning_type",
            "yaml-finetuning-qlora",
            patch={"finetuning_type": "lora", "quantization_bit": args.get("quantization_bit") or 4},
        )
    ]


def rule_do_train(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    if args.get("do_train") is True:
        return []
    return [
        Finding.of("do_train", "yaml-do-train", patch={"do_train": True})
    ]


def rule_stage(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    stage = args.get("stage", "sft")
    if stage == "sft":
        return []
    return [
        Finding.of("stage", "yaml-stage-not-sft", severity="warning", stage=repr(stage))
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


def rule_not_in_form(args: dict[str, Any], preset: HardwarePreset | None) -> list[Finding]:
    known = static_names().keys
    in_form = schema.yaml_keys_in_form()
    return [
        Finding.of(key, "yaml-not-in-form", severity="warning", name=_key_shown(key))
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
    merged = {**schema.form_defaults(), **form_values, **({"preset": preset.id} if preset is not None else {})}
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


# Values LLaMA-Factory accepts that the form has no choice for (backend/config/schema.py).
def llamafactory_only_choices() -> dict[str, frozenset[Any]]:
    return {f.name: frozenset(f.llamafactory_choices) for f in schema.run_fields() if f.llamafactory_choices}


def _form_only_choice(finding: Finding, values: dict[str, Any]) -> Finding:
    """A value that is valid for LLaMA-Factory but not offered by the form is a warning."""
    value = values.get(finding.key)
    if finding.rule == "bad-choice" and value in llamafactory_only_choices().get(finding.key, ()):
        return Finding.of(finding.key, "yaml-not-in-form", message="yaml-form-has-no-choice", severity="warning", value=repr(value), name=finding.key)
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
