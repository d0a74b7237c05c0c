"""The run configuration: a typed object at the boundary, and the YAML LLaMA-Factory reads.

Form values (strings, floats, whatever the browser sent) are parsed once, here, into a
`RunConfig`; everything after that — checks, preview, the YAML writer, the launcher — reads
typed fields. Which fields there are, their LLaMA-Factory keys, defaults, choices and ranges
is backend/config/schema.py's table; this module is its reader: `parse_form`, `to_form` and
`to_llamafactory_args` walk the table, so a field added there is parsed, shown and written
without an edit here. The section dataclasses below hold no defaults: parse_form is the only
thing that builds them, from the schema's (a saved run is read back through it too:
backend/config/run_form.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from backend.config import schema
from backend.config.schema import (
    DATASETS_MAX,
    QUANTIZATION_BITS,
    NumberRange,
)
from backend.findings import Finding
from backend.i18n import CATALOGUE, DEFAULT_LOCALE, Message

Precision = Literal["bf16", "fp16", "fp32"]
FlashAttn = Literal["auto", "sdpa", "disabled", "fa2"]
FinetuningType = Literal["lora", "freeze", "full"]
Stage = Literal["pt", "sft", "rm", "dpo", "kto"]  # schema.STAGES: what the form runs


@dataclass(frozen=True)
class ModelSpec:
    model_name_or_path: str
    template: str
    # Not a form field: RocBoard never runs a model folder's own code (schema.ROCBOARD_OWNED_KEYS).
    trust_remote_code: bool = False


@dataclass(frozen=True)
class MethodSpec:
    stage: Stage
    finetuning_type: FinetuningType
    lora_rank: int
    lora_alpha: int
    lora_dropout: float
    lora_target: str
    quantization_bit: int | None  # 4 or 8 = QLoRA through bitsandbytes
    # DPO / KTO only (schema.PREFERENCE_STAGES); pref_loss is DPO's alone.
    pref_beta: float
    pref_loss: str
    pref_ftx: float


@dataclass(frozen=True)
class DataSpec:
    dataset_dir: str
    datasets: tuple[str, ...]
    cutoff_len: int
    max_samples: int | None


@dataclass(frozen=True)
class TrainingSpec:
    learning_rate: float
    num_train_epochs: float
    max_steps: int  # 0 = train for num_train_epochs; > 0 overrides epochs
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    lr_scheduler_type: str
    warmup_ratio: float
    warmup_steps: int  # > 0 wins over warmup_ratio (backend/config/schema.py WARMUP_RATIO)
    optim: str
    logging_steps: int
    save_steps: int
    gradient_checkpointing: bool
    seed: int


@dataclass(frozen=True)
class PrecisionSpec:
    precision: Precision
    flash_attn: FlashAttn


@dataclass(frozen=True)
class HardwareSpec:
    preset: str  # the preset's id (file stem in presets/)
    use_cpu: bool  # train on the CPU even where an accelerator is visible
    env: tuple[tuple[str, str], ...]  # environment the preset exports for the trainer


@dataclass(frozen=True)
class RunConfig:
    run_name: str
    model: ModelSpec
    method: MethodSpec
    data: DataSpec
    training: TrainingSpec
    precision: PrecisionSpec
    hardware: HardwareSpec  # the preset's: its id is a field, use_cpu and env come with the preset
    # (form name, typed value) of schema fields no rule reads yet (`path=""`): a field added
    # to the schema alone is parsed, written to the YAML and shown again from here.
    extra: tuple[tuple[str, Any], ...]

    def value(self, name: str) -> Any:
        """The typed value of the form field `name`."""
        found = schema.field(name)
        if not found.path:
            return dict(self.extra).get(name, found.default)
        value: Any = self
        for part in found.path.split("."):
            value = getattr(value, part)
        return value


_SECTIONS: dict[str, type] = {"model": ModelSpec, "method": MethodSpec, "data": DataSpec, "training": TrainingSpec, "precision": PrecisionSpec, "hardware": HardwareSpec}


def to_llamafactory_args(config: RunConfig, output_dir: str | Path) -> dict[str, Any]:
    """The LLaMA-Factory training arguments for `config`: what the run is first, then each
    form field in the schema's order (its codec decides the keys), then RocBoard's own."""
    values = {f.name: config.value(f.name) for f in schema.run_fields()}
    args: dict[str, Any] = {"stage": config.method.stage, "do_train": True}
    for form_field in schema.run_fields():
        if form_field.yaml is not None:
            args.update(form_field.yaml.write(values[form_field.name], values))
    # RocBoard's defaults: "Other keys" may set these (plot_loss: false, …). report_to is a
    # form field of its own (schema.REPORT_TO).
    for key, value in (
        ("plot_loss", True),
        # Lets LLaMA-Factory log tokens per second (the page shows it beside the ETA).
        ("include_num_input_tokens_seen", True),
    ):
        args.setdefault(key, value)
    # Where and how the run is written: RocBoard's alone (schema.ROCBOARD_OWNED_KEYS).
    args.update(trust_remote_code=config.model.trust_remote_code, output_dir=str(output_dir), overwrite_output_dir=True)
    if config.hardware.use_cpu:
        # Without it, a CPU run with bf16 fails in the trainer's device checks.
        args["use_cpu"] = True
    return args


def to_yaml(config: RunConfig, output_dir: str | Path) -> str:
    return yaml.safe_dump(to_llamafactory_args(config, output_dir), sort_keys=False, allow_unicode=True)


# --- the form boundary ------------------------------------------------------------------

# Names of the form's fields, and what each holds before the user touches it (derived from
# backend/config/schema.py; functions here read the schema at call time).
FORM_DEFAULTS: dict[str, Any] = schema.form_defaults()
FORM_FIELDS: tuple[str, ...] = tuple(FORM_DEFAULTS)


# --- limits: what a value may be --------------------------------------------------------
#
# Every number and list the form, the YAML import (through parse_form) and the multi-GPU plan
# (backend/config/distributed.py) accept is bounded by its schema field (`range`, `max_chars`). A
# value outside gets a finding naming the field, the range and a fix, and falls back to its
# default so nothing downstream (the preview, the estimate, node commands, the YAML) sees it.

NUMBER_RANGES: dict[str, NumberRange] = schema.number_ranges()
TEXT_MAX_CHARS: dict[str, int] = schema.text_limits()
# Characters no field of a training config holds: NUL and the other C0 controls, DEL,
# and lone surrogates (not text at all: they cannot be encoded, and break the page's JSON).
_BAD_CHARACTER = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")
_DIGITS = re.compile(r"[+-]?[0-9][0-9_]*")
_HUGE_DIGITS = 30  # more digits than any bound above: no need to convert them


def shown(value: Any, limit: int = 40) -> str:
    """`value` as a finding shows it: short, printable, and never costly to compute (a
    4,000-digit int, a 50k-deep list or a 250 kB string become a short description)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if abs(value) < 10**15:
            return str(value)
        return f"{float(value):.3g}" if value.bit_length() < 1000 else huge_number(value < 0, _digit_count(value))
    if isinstance(value, float):
        return f"{value:g}" if math.isfinite(value) else repr(value)
    if isinstance(value, str):
        text = value if len(value) <= limit else value[:limit] + "…"
        # repr escapes controls and lone surrogates; ascii() is not needed for other letters.
        return repr(text)
    for kind in (list, tuple, dict, set):
        if isinstance(value, kind):
            return Message(f"value.{kind.__name__}", count=len(value))
    return Message("value.other", kind=type(value).__name__)


def field_noun(name: str) -> str:
    """The name messages give the field `name`: the catalogue's `field.<name>`, as a message
    (its English words as a string; render_message puts it into the reader's language), or
    `name` itself for a key with no noun."""
    key = f"field.{name}"
    return Message(key) if key in CATALOGUE[DEFAULT_LOCALE] else name


def range_finding(name: str, value: float, what: str, key: str | None = None) -> Finding | None:
    """The finding for a number outside NUMBER_RANGES[name]; None inside it."""
    bounds = schema.number_ranges()[name]
    if bounds.contains(value):
        return None
    rule = bounds.rule_low if bounds.rule_low and not value > bounds.low else bounds.rule
    return Finding.of(
        key or name,
        rule,
        message="out-of-range",
        patch={key or name: bounds.example},
        field=what,
        value=shown(value),
        range=bounds.text(),
        example=shown(bounds.example),
    )


def parse_text(value: Any, what: str, limit: int, key: str) -> tuple[str, Finding | None]:
    """`value` as text of at most `limit` characters without control characters, or a
    finding saying why not (its key `key`). None is the empty text; a number is its digits."""
    if value is None:
        return "", None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or (isinstance(value, int) and value.bit_length() > 100):
        return "", Finding.of(key, "text-not-text", field=what, value=shown(value))
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        return "", Finding.of(key, "text-too-long", field=what, length=len(text), limit=limit)
    bad = _BAD_CHARACTER.search(text)
    if bad:
        return "", Finding.of(key, "text-bad-character", field=what, character=f"U+{ord(bad.group()):04X}", position=bad.start() + 1)
    return text, None


def too_many_finding(key: str, what: str, count: int, limit: int) -> Finding:
    """A list (datasets, GPUs) longer than any real use."""
    return Finding.of(key, "too-many-items", field=what, count=count, limit=limit)


def huge_number(negative: bool, digits: int) -> str:
    return Message("value.huge-negative" if negative else "value.huge", digits=digits)


class NotANumber(ValueError):
    """A value that is not a (whole) number at all."""


class NumberTooLarge(ValueError):
    """A number too large to convert: out of every range."""


def parse_number(value: Any, kind: type) -> float | int:
    """`value` as an int or float. NotANumber for anything else (text, a list, None, a bool,
    NaN, infinity, a fraction where a whole number belongs); NumberTooLarge for a number with
    more digits than any range allows (converting a 4,000-digit int to float overflows)."""
    if isinstance(value, bool) or value is None or value == "":
        raise NotANumber
    if isinstance(value, str):
        text = value.strip()
        if _DIGITS.fullmatch(text):
            if len(text.lstrip("+-").replace("_", "").lstrip("0")) > _HUGE_DIGITS:
                raise NumberTooLarge
            value = int(text)
        else:
            if len(text) > 64:  # no number is written that long: do not hand it to float()
                raise NotANumber
            try:
                value = float(text)
            except ValueError:
                raise NotANumber from None
    if isinstance(value, int):
        if value.bit_length() > 100:
            raise NumberTooLarge
        return value if kind is int else float(value)
    if not isinstance(value, float):
        raise NotANumber
    if not math.isfinite(value):
        raise NotANumber
    if kind is int:
        if value != int(value):
            raise NotANumber
        return int(value)
    return value


def not_a_number_finding(key: str, value: Any, what: str, kind: type) -> Finding:
    """A value that is no number at all (text, a list, NaN, a fraction where a whole number belongs)."""
    message = "" if kind is int else "not-a-number-float"
    return Finding.of(key, "not-a-number", message=message, field=what, value=shown(value))


def huge_finding(name: str, value: Any, what: str, key: str | None = None) -> Finding:
    """The range finding for a number parse_number found too large to convert."""
    bounds = schema.number_ranges()[name]
    negative = value.startswith("-") if isinstance(value, str) else value < 0
    return Finding.of(
        key or name,
        bounds.rule_low if negative and bounds.rule_low else bounds.rule,
        message="out-of-range-negative-digits" if negative else "out-of-range-digits",
        patch={key or name: bounds.example},
        field=what,
        digits=_digit_count(value),
        range=bounds.text(),
        example=shown(bounds.example),
    )


def _digit_count(value: Any) -> int:
    if isinstance(value, int):
        return int(value.bit_length() * 0.30103) + 1
    return len(str(value).strip().lstrip("+-").replace("_", "").lstrip("0"))


def parse_quantization(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value is None:
        raise ValueError
    if isinstance(value, int) and value.bit_length() > 8:
        raise ValueError
    text = str(value).strip().lower()[:16]
    if text in ("", "none", "0", "no", "off"):
        return None
    return int(float(text))


class _FormReader:
    """Reads raw form values into typed values, collecting a finding per bad field; a bad
    field's value is its schema default."""

    def __init__(self, values: Mapping[str, Any]):
        self.values = values
        self.findings: list[Finding] = []

    def raw(self, form_field: schema.Field) -> Any:
        value = self.values.get(form_field.name, form_field.default)
        return value.strip() if isinstance(value, str) else value

    def read(self, form_field: schema.Field) -> Any:
        """The typed value of `form_field` (its kind says how to read it)."""
        return getattr(self, f"_{form_field.kind}")(form_field)

    def _text(self, form_field: schema.Field) -> str:
        text, finding = parse_text(self.raw(form_field), field_noun(form_field.name), form_field.max_chars, key=form_field.name)
        if finding is not None:
            self.findings.append(finding)
            return str(form_field.default)
        return text or str(form_field.default) if form_field.blank_is_default else text

    def _datasets(self, form_field: schema.Field) -> tuple[str, ...]:
        datasets = tuple(d.strip() for d in re.split(r"[,\s]+", self._text(form_field)) if d.strip())
        if len(datasets) > DATASETS_MAX:
            self.findings.append(too_many_finding(form_field.name, field_noun(form_field.name), len(datasets), DATASETS_MAX))
            return ()
        return datasets

    def _number(self, form_field: schema.Field, kind: type) -> Any:
        value, what = self.raw(form_field), field_noun(form_field.name)
        try:
            number = parse_number(value, kind)
        except NumberTooLarge:
            self.findings.append(huge_finding(form_field.name, value, what))
            return form_field.default
        except NotANumber:
            self.findings.append(not_a_number_finding(form_field.name, value, what, kind))
            return form_field.default
        if form_field.range is not None:
            finding = range_finding(form_field.name, number, what)
            if finding is not None:
                self.findings.append(finding)
                return form_field.default
        return number

    def _int(self, form_field: schema.Field) -> int:
        return self._number(form_field, int)

    def _optional_int(self, form_field: schema.Field) -> int | None:
        """A whole number, or None for an empty value (or a bad one: the default is empty)."""
        if self.raw(form_field) in (None, ""):
            return None
        number = self._number(form_field, int)
        return None if number == form_field.default else number

    def _float(self, form_field: schema.Field) -> float:
        return self._number(form_field, float)

    def _choice(self, form_field: schema.Field) -> str:
        value = self.raw(form_field)
        if not isinstance(value, str) or value not in form_field.choices:
            choices = ", ".join(map(str, form_field.choices))
            self.findings.append(Finding.of(form_field.name, "bad-choice", field=field_noun(form_field.name), value=shown(value), choices=choices))
            return form_field.default
        return value

    def _flag(self, form_field: schema.Field) -> bool:
        value = self.raw(form_field)
        if isinstance(value, str):
            return value.lower() not in ("", "0", "false", "no", "off", "none")
        return bool(value) if isinstance(value, (bool, int, float)) or value is None else bool(form_field.default)

    def _other_keys(self, form_field: schema.Field) -> tuple[tuple[str, Any], ...]:
        """LLaMA-Factory keys the form has no widget for, typed as YAML types them; each bad
        entry a finding (and left out), so a Start never writes a key LLaMA-Factory refuses."""
        from backend.config.other_keys import parse_other_keys

        raw = self.raw(form_field)
        # Lines: the text rule per line (its length bound is the whole field's).
        lines = raw.splitlines() if isinstance(raw, str) else [raw]
        checked = [parse_text(line, field_noun(form_field.name), form_field.max_chars, key=form_field.name) for line in lines]
        bad = [finding for _, finding in checked if finding is not None]
        if bad or (isinstance(raw, str) and len(raw) > form_field.max_chars):
            self.findings.append(bad[0] if bad else Finding.of(form_field.name, "text-too-long", field=field_noun(form_field.name), length=len(raw), limit=form_field.max_chars))
            return ()
        pairs, findings = parse_other_keys("\n".join(text for text, _ in checked), form_field.name)
        self.findings.extend(findings)
        return pairs

    def _quantization(self, form_field: schema.Field) -> int | None:
        value = self.raw(form_field)
        try:
            bits = parse_quantization(value)
            if bits not in QUANTIZATION_BITS:
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            self.findings.append(Finding.of(form_field.name, "bad-choice", message="bad-quantization", value=shown(value)))
            return None
        return bits


def parse_form(values: Mapping[str, Any], preset_env: tuple[tuple[str, str], ...] = (), use_cpu: bool = False) -> tuple[RunConfig, list[Finding]]:
    """Typed config from raw form values. Fields that do not parse, or hold a value outside
    their schema range / length, get a finding each and fall back to their default, so the
    caller can show every problem at once and never handles an absurd value."""
    if not isinstance(values, Mapping):
        values = {}
    form = _FormReader(values)
    sections: dict[str, dict[str, Any]] = {name: {} for name in _SECTIONS}
    top: dict[str, Any] = {}
    extra: list[tuple[str, Any]] = []
    for form_field in schema.run_fields():
        value = form.read(form_field)
        if not form_field.path:
            extra.append((form_field.name, value))
        elif "." in form_field.path:
            section, attribute = form_field.path.split(".", 1)
            sections[section][attribute] = value
        else:
            top[form_field.path] = value
    sections["hardware"].update(use_cpu=use_cpu, env=preset_env)
    config = RunConfig(**top, **{name: kind(**sections[name]) for name, kind in _SECTIONS.items()}, extra=tuple(extra))
    return config, form.findings


def form_value(form_field: schema.Field, value: Any) -> Any:
    """A typed value as the form shows it."""
    if form_field.kind == "datasets":
        return ",".join(value)
    if form_field.kind == "quantization":
        return "none" if value is None else str(value)
    if form_field.kind == "optional_int":
        return "" if value is None else value
    if form_field.kind == "other_keys":
        from backend.config.other_keys import other_keys_text

        return other_keys_text(value)
    return value


def to_form(config: RunConfig) -> dict[str, Any]:
    """The form values that show `config` (the inverse of parse_form)."""
    return {f.name: form_value(f, config.value(f.name)) for f in schema.run_fields()}


__all__ = [
    "DataSpec",
    "FORM_DEFAULTS",
    "FORM_FIELDS",
    "HardwareSpec",
    "NUMBER_RANGES",
    "NumberRange",
    "MethodSpec",
    "ModelSpec",
    "PrecisionSpec",
    "RunConfig",
    "TrainingSpec",
    "field_noun",
    "form_value",
    "not_a_number_finding",
    "parse_form",
    "parse_number",
    "parse_text",
    "too_many_finding",
    "range_finding",
    "shown",
    "to_form",
    "to_llamafactory_args",
    "to_yaml",
]
