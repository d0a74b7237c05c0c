"""The run configuration: a typed object at the boundary, and the YAML LLaMA-Factory reads.

Form values (strings, floats, whatever the browser sent) are parsed once, here, into a
`RunConfig`; everything after that — checks, preview, the YAML writer, the launcher — reads
typed fields. The YAML writer is the only place that knows LLaMA-Factory's key names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml

from backend.findings import Finding

Precision = Literal["bf16", "fp16", "fp32"]
FlashAttn = Literal["auto", "sdpa", "disabled", "fa2"]
FinetuningType = Literal["lora", "freeze", "full"]

PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp32")
FLASH_ATTN_CHOICES: tuple[str, ...] = ("auto", "sdpa", "disabled", "fa2")
FINETUNING_TYPES: tuple[str, ...] = ("lora", "freeze", "full")
QUANTIZATION_BITS: tuple[int | None, ...] = (None, 8, 4)


@dataclass(frozen=True)
class ModelSpec:
    model_name_or_path: str
    template: str = "llama3"
    trust_remote_code: bool = False


@dataclass(frozen=True)
class MethodSpec:
    finetuning_type: FinetuningType = "lora"
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target: str = "all"
    quantization_bit: int | None = None  # 4 or 8 = QLoRA through bitsandbytes


@dataclass(frozen=True)
class DataSpec:
    dataset_dir: str
    datasets: tuple[str, ...]
    cutoff_len: int = 1024
    max_samples: int | None = None


@dataclass(frozen=True)
class TrainingSpec:
    learning_rate: float = 1e-4
    num_train_epochs: float = 3.0
    max_steps: int = 0  # 0 = train for num_train_epochs; > 0 overrides epochs
    per_device_train_batch_size: int = 1
    gradient_accumulation_steps: int = 8
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.0
    logging_steps: int = 10
    save_steps: int = 500
    gradient_checkpointing: bool = True
    seed: int = 42


@dataclass(frozen=True)
class PrecisionSpec:
    precision: Precision = "bf16"
    flash_attn: FlashAttn = "auto"


@dataclass(frozen=True)
class HardwareSpec:
    preset: str = "cpu-demo"  # the preset's id (file stem in presets/)
    use_cpu: bool = False  # train on the CPU even where an accelerator is visible
    env: tuple[tuple[str, str], ...] = ()  # environment the preset exports for the trainer


@dataclass(frozen=True)
class RunConfig:
    run_name: str
    model: ModelSpec
    method: MethodSpec
    data: DataSpec
    training: TrainingSpec
    precision: PrecisionSpec
    hardware: HardwareSpec = field(default_factory=HardwareSpec)


def to_llamafactory_args(config: RunConfig, output_dir: str | Path) -> dict[str, Any]:
    """The LLaMA-Factory training arguments for `config`, in a readable order."""
    model, method, data, training, precision = (
        config.model,
        config.method,
        config.data,
        config.training,
        config.precision,
    )
    args: dict[str, Any] = {
        "model_name_or_path": model.model_name_or_path,
        "template": model.template,
        "trust_remote_code": model.trust_remote_code,
        "stage": "sft",
        "do_train": True,
        "finetuning_type": method.finetuning_type,
    }
    if method.finetuning_type == "lora":
        args.update(
            lora_rank=method.lora_rank,
            lora_alpha=method.lora_alpha,
            lora_dropout=method.lora_dropout,
            lora_target=method.lora_target,
        )
    if method.quantization_bit is not None:
        args["quantization_bit"] = method.quantization_bit
        args["quantization_method"] = "bnb"
    args.update(dataset=",".join(data.datasets), dataset_dir=data.dataset_dir, cutoff_len=data.cutoff_len)
    if data.max_samples is not None:
        args["max_samples"] = data.max_samples
    args.update(
        output_dir=str(output_dir),
        logging_steps=training.logging_steps,
        save_steps=training.save_steps,
        plot_loss=True,
        overwrite_output_dir=True,
        report_to="none",
        # Lets LLaMA-Factory log tokens per second (the page shows it beside the ETA).
        include_num_input_tokens_seen=True,
        per_device_train_batch_size=training.per_device_train_batch_size,
        gradient_accumulation_steps=training.gradient_accumulation_steps,
        learning_rate=training.learning_rate,
        num_train_epochs=training.num_train_epochs,
        lr_scheduler_type=training.lr_scheduler_type,
        warmup_ratio=training.warmup_ratio,
        seed=training.seed,
    )
    if training.max_steps > 0:
        args["max_steps"] = training.max_steps
    # LLaMA-Factory turns gradient checkpointing on unless told not to.
    if not training.gradient_checkpointing:
        args["disable_gradient_checkpointing"] = True
    args["bf16"] = precision.precision == "bf16"
    args["fp16"] = precision.precision == "fp16"
    args["flash_attn"] = precision.flash_attn
    if config.hardware.use_cpu:
        # Without it, a CPU run with bf16 fails in the trainer's device checks.
        args["use_cpu"] = True
    return args


def to_yaml(config: RunConfig, output_dir: str | Path) -> str:
    return yaml.safe_dump(to_llamafactory_args(config, output_dir), sort_keys=False, allow_unicode=True)


# --- the form boundary ------------------------------------------------------------------

# Names of the form's fields, and what each holds before the user touches it. The page,
# presets and the importer all speak in these names.
FORM_DEFAULTS: dict[str, Any] = {
    "preset": "cpu-demo",
    "model_path": "",
    "template": "llama3",
    "dataset_dir": "",
    "dataset": "",
    "finetuning_type": "lora",
    "lora_rank": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.0,
    "lora_target": "all",
    "quantization_bit": "none",
    "learning_rate": 1e-4,
    "num_train_epochs": 3.0,
    "max_steps": 0,
    "batch_size": 1,
    "grad_accum": 8,
    "cutoff_len": 1024,
    "precision": "bf16",
    "flash_attn": "auto",
    "gradient_checkpointing": True,
    "logging_steps": 10,
    "save_steps": 500,
    "run_name": "",
}
FORM_FIELDS: tuple[str, ...] = tuple(FORM_DEFAULTS)


# --- limits: what a value may be, in one table ------------------------------------------
#
# Every number and list the form, the YAML import (through parse_form) and the multi-GPU plan
# (backend/distributed.py) accept is bounded here. The bounds are generous for real use and
# refuse what can only be a typo or an attack: a value outside them gets a finding naming the
# field, the range and a fix, and falls back to its default so nothing downstream (the
# preview, the estimate, node commands, the YAML) ever sees it.


@dataclass(frozen=True)
class NumberRange:
    low: float
    high: float
    example: Any  # the value the fix suggests (and its patch sets)
    rule: str  # the finding's rule name; `rule_low` when the value is below `low`, if set
    low_open: bool = False  # the range excludes `low` (a learning rate of 0 trains nothing)
    high_open: bool = False  # the range excludes `high` (a dropout of 1 drops everything)
    rule_low: str = ""

    def contains(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def text(self) -> str:
        """The range in interval notation, the same in every language: "[1, 1024]", "(0, 1]"."""
        return f"{'(' if self.low_open else '['}{shown(self.low)}, {shown(self.high)}{')' if self.high_open else ']'}"


GPUS_PER_NODE_MAX = 64  # MI300X in CPX mode shows 8 x 8 = 64 GPUs; 8 is usual
NODES_MAX = 1024
DDP_TIMEOUT_MAX_S = 7 * 24 * 3600  # a week: longer is a hang nobody is watching
NUMBER_RANGES: dict[str, NumberRange] = {
    # the form (keys of FORM_DEFAULTS)
    "lora_rank": NumberRange(1, 1024, 8, rule="lora-rank-range"),  # beyond 1024 a LoRA is no longer low-rank
    "lora_alpha": NumberRange(1, 100_000, 16, rule="lora-alpha-range"),
    "lora_dropout": NumberRange(0, 1, 0.0, rule="lora-dropout-range", high_open=True),
    # Above 1 no fine-tuning recipe trains: a typo for 1e-4 is likelier.
    "learning_rate": NumberRange(0, 1, 1e-4, rule="learning-rate-absurd", low_open=True, rule_low="learning-rate-not-positive"),
    "num_train_epochs": NumberRange(0, 1000, 3.0, rule="epochs-range"),
    "max_steps": NumberRange(0, 1_000_000_000, 0, rule="max-steps-range"),  # 0 = train by epochs
    "batch_size": NumberRange(1, 1024, 1, rule="batch-size-range"),  # per device: no accelerator holds more activations
    "grad_accum": NumberRange(1, 100_000, 8, rule="grad-accum-range"),
    "cutoff_len": NumberRange(1, 1_048_576, 1024, rule="cutoff-range"),  # 1M tokens: the longest contexts models have
    "logging_steps": NumberRange(1, 1_000_000_000, 10, rule="logging-steps-range"),
    "save_steps": NumberRange(1, 1_000_000_000, 500, rule="save-steps-range"),
    # the multi-GPU plan (backend/distributed.py PLAN_FORM_DEFAULTS)
    "dist_nproc": NumberRange(1, GPUS_PER_NODE_MAX, 1, rule="nproc-range"),
    "dist_gpus": NumberRange(0, GPUS_PER_NODE_MAX - 1, 0, rule="gpu-index-range"),  # each index of the list
    "dist_nnodes": NumberRange(1, NODES_MAX, 1, rule="nnodes-range"),
    "dist_node_rank": NumberRange(0, NODES_MAX - 1, 0, rule="node-rank-range"),
    "dist_master_port": NumberRange(1, 65535, 29500, rule="bad-port"),
    "dist_ddp_timeout_s": NumberRange(1, DDP_TIMEOUT_MAX_S, 3600, rule="bad-timeout"),
}
# Text fields: at most this many characters. A path is at most PATH_MAX (4096) bytes.
TEXT_MAX_CHARS: dict[str, int] = {
    "preset": 64,
    "model_path": 4096,
    "template": 64,
    "dataset_dir": 4096,
    "dataset": 4096,
    "lora_target": 1024,
    "run_name": 256,  # the run-name rule asks for 64; a longer one still gets that rule's fix
}
DATASETS_MAX = 64  # datasets mixed in one run
TEXT_MAX_DEFAULT = 256
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
    if isinstance(value, (list, tuple, dict, set)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    return f"a {type(value).__name__}"


def range_finding(name: str, value: float, what: str, key: str | None = None) -> Finding | None:
    """The finding for a number outside NUMBER_RANGES[name]; None inside it."""
    bounds = NUMBER_RANGES[name]
    if bounds.contains(value):
        return None
    rule = bounds.rule_low if bounds.rule_low and not value > bounds.low else bounds.rule
    return Finding(
        key=key or name,
        problem=f"{what} is {shown(value)}, outside its allowed range {bounds.text()}.",
        fix=f"Enter a value in {bounds.text()} for {what}, e.g. {shown(bounds.example)}.",
        rule=rule,
        patch={key or name: bounds.example},
    )


def parse_text(value: Any, what: str, limit: int, key: str) -> tuple[str, Finding | None]:
    """`value` as text of at most `limit` characters without control characters, or a
    finding saying why not (its key `key`). None is the empty text; a number is its digits."""
    if value is None:
        return "", None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or (isinstance(value, int) and value.bit_length() > 100):
        return "", Finding(key, f"{what} must be text, not {shown(value)}.", f"Enter {what} as text.", rule="text-not-text")
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        return "", Finding(key, f"{what} is {len(text)} characters long; at most {limit} are allowed.", f"Shorten {what} to {limit} characters or fewer.", rule="text-too-long")
    bad = _BAD_CHARACTER.search(text)
    if bad:
        return "", Finding(
            key,
            f"{what} holds the character U+{ord(bad.group()):04X} at position {bad.start() + 1}, which is not allowed here.",
            f"Type {what} again as plain text (no control characters).",
            rule="text-bad-character",
        )
    return text, None


def too_many_finding(key: str, what: str, count: int, limit: int) -> Finding:
    """A list (datasets, GPUs) longer than any real use."""
    return Finding(key, f"{what} lists {count} items; at most {limit} are allowed.", f"List at most {limit} items in {what}.", rule="too-many-items")


def huge_number(negative: bool, digits: int) -> str:
    return f"a {'negative ' if negative else ''}{digits}-digit number"


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


class _FormReader:
    """Reads raw form values into typed values, collecting a finding per bad field."""

    def __init__(self, values: Mapping[str, Any]):
        self.values = values
        self.findings: list[Finding] = []

    def raw(self, name: str) -> Any:
        value = self.values.get(name, FORM_DEFAULTS.get(name))
        return value.strip() if isinstance(value, str) else value

    def text(self, name: str) -> str:
        text, finding = parse_text(self.raw(name), _FIELD_NAMES.get(name, name), TEXT_MAX_CHARS.get(name, TEXT_MAX_DEFAULT), key=name)
        if finding is not None:
            self.findings.append(finding)
            return str(FORM_DEFAULTS.get(name, ""))
        return text

    def number(self, name: str, kind: type, what: str) -> Any:
        value = self.raw(name)
        try:
            number = parse_number(value, kind)
        except NumberTooLarge:
            self.findings.append(huge_finding(name, value, what))
            return FORM_DEFAULTS[name]
        except NotANumber:
            self.findings.append(
                Finding(
                    key=name,
                    problem=f"{what} must be {'a whole number' if kind is int else 'a number'}, not {shown(value)}.",
                    fix=f"Enter {'a whole number' if kind is int else 'a number'} for {what}.",
                    rule="not-a-number",
                )
            )
            return FORM_DEFAULTS[name]
        if name in NUMBER_RANGES:
            finding = range_finding(name, number, what)
            if finding is not None:
                self.findings.append(finding)
                return FORM_DEFAULTS[name]
        return number

    def choice(self, name: str, choices: tuple[str, ...], what: str) -> str:
        value = self.raw(name)
        if not isinstance(value, str) or value not in choices:
            self.findings.append(
                Finding(
                    key=name,
                    problem=f"{what} {shown(value)} is not one of {', '.join(choices)}.",
                    fix=f"Pick one of {', '.join(choices)} for {what}.",
                    rule="bad-choice",
                )
            )
            return FORM_DEFAULTS[name]
        return value

    def flag(self, name: str) -> bool:
        value = self.raw(name)
        if isinstance(value, str):
            return value.lower() not in ("", "0", "false", "no", "off", "none")
        return bool(value) if isinstance(value, (bool, int, float)) or value is None else bool(FORM_DEFAULTS[name])


def huge_finding(name: str, value: Any, what: str, key: str | None = None) -> Finding:
    """The range finding for a number parse_number found too large to convert."""
    bounds = NUMBER_RANGES[name]
    negative = value.startswith("-") if isinstance(value, str) else value < 0
    return Finding(
        key=key or name,
        problem=f"{what} is {huge_number(negative, _digit_count(value))}, outside its allowed range {bounds.text()}.",
        fix=f"Enter a value in {bounds.text()} for {what}, e.g. {shown(bounds.example)}.",
        rule=bounds.rule_low if negative and bounds.rule_low else bounds.rule,
        patch={key or name: bounds.example},
    )


def _digit_count(value: Any) -> int:
    if isinstance(value, int):
        return int(value.bit_length() * 0.30103) + 1
    return len(str(value).strip().lstrip("+-").replace("_", "").lstrip("0"))


# The English names of the fields that messages speak of (the catalogue's `field.*` words).
_FIELD_NAMES: dict[str, str] = {
    "preset": "Hardware preset",
    "model_path": "Model path",
    "template": "Template",
    "dataset_dir": "Dataset directory",
    "dataset": "Dataset",
    "lora_target": "LoRA target",
    "run_name": "Run name",
}


def parse_quantization(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value is None:
        raise ValueError
    if isinstance(value, int) and value.bit_length() > 8:
        raise ValueError
    text = str(value).strip().lower()[:16]
    if text in ("", "none", "0", "no", "off"):
        return None
    return int(float(text))


def parse_form(values: Mapping[str, Any], preset_env: tuple[tuple[str, str], ...] = (), use_cpu: bool = False) -> tuple[RunConfig, list[Finding]]:
    """Typed config from raw form values. Fields that do not parse, or hold a value outside
    NUMBER_RANGES / TEXT_MAX_CHARS, get a finding each and fall back to their default, so the
    caller can show every problem at once and never handles an absurd value."""
    if not isinstance(values, Mapping):
        values = {}
    form = _FormReader(values)
    datasets = tuple(d.strip() for d in re.split(r"[,\s]+", form.text("dataset")) if d.strip())
    if len(datasets) > DATASETS_MAX:
        form.findings.append(too_many_finding("dataset", "Dataset", len(datasets), DATASETS_MAX))
        datasets = ()
    try:
        quantization_bit = parse_quantization(form.raw("quantization_bit"))
        if quantization_bit not in QUANTIZATION_BITS:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        form.findings.append(
            Finding("quantization_bit", f"Quantization {shown(form.raw('quantization_bit'))} is not none, 8 or 4.", "Pick none, 8 or 4.", rule="bad-choice")
        )
        quantization_bit = None
    config = RunConfig(
        run_name=form.text("run_name"),
        model=ModelSpec(model_name_or_path=form.text("model_path"), template=form.text("template")),
        method=MethodSpec(
            finetuning_type=form.choice("finetuning_type", FINETUNING_TYPES, "Fine-tuning type"),  # type: ignore[arg-type]
            lora_rank=form.number("lora_rank", int, "LoRA rank"),
            lora_alpha=form.number("lora_alpha", int, "LoRA alpha"),
            lora_dropout=form.number("lora_dropout", float, "LoRA dropout"),
            lora_target=form.text("lora_target") or "all",
            quantization_bit=quantization_bit,
        ),
        data=DataSpec(
            dataset_dir=form.text("dataset_dir"),
            datasets=datasets,
            cutoff_len=form.number("cutoff_len", int, "Cutoff length"),
        ),
        training=TrainingSpec(
            learning_rate=form.number("learning_rate", float, "Learning rate"),
            num_train_epochs=form.number("num_train_epochs", float, "Epochs"),
            max_steps=form.number("max_steps", int, "Max steps"),
            per_device_train_batch_size=form.number("batch_size", int, "Batch size"),
            gradient_accumulation_steps=form.number("grad_accum", int, "Gradient accumulation"),
            logging_steps=form.number("logging_steps", int, "Logging steps"),
            save_steps=form.number("save_steps", int, "Save steps"),
            gradient_checkpointing=form.flag("gradient_checkpointing"),
        ),
        precision=PrecisionSpec(
            precision=form.choice("precision", PRECISIONS, "Precision"),  # type: ignore[arg-type]
            flash_attn=form.choice("flash_attn", FLASH_ATTN_CHOICES, "flash_attn"),  # type: ignore[arg-type]
        ),
        hardware=HardwareSpec(preset=form.text("preset"), use_cpu=use_cpu, env=preset_env),
    )
    return config, form.findings


def to_form(config: RunConfig) -> dict[str, Any]:
    """The form values that show `config` (the inverse of parse_form)."""
    return {
        "preset": config.hardware.preset,
        "model_path": config.model.model_name_or_path,
        "template": config.model.template,
        "dataset_dir": config.data.dataset_dir,
        "dataset": ",".join(config.data.datasets),
        "finetuning_type": config.method.finetuning_type,
        "lora_rank": config.method.lora_rank,
        "lora_alpha": config.method.lora_alpha,
        "lora_dropout": config.method.lora_dropout,
        "lora_target": config.method.lora_target,
        "quantization_bit": "none" if config.method.quantization_bit is None else str(config.method.quantization_bit),
        "learning_rate": config.training.learning_rate,
        "num_train_epochs": config.training.num_train_epochs,
        "max_steps": config.training.max_steps,
        "batch_size": config.training.per_device_train_batch_size,
        "grad_accum": config.training.gradient_accumulation_steps,
        "cutoff_len": config.data.cutoff_len,
        "precision": config.precision.precision,
        "flash_attn": config.precision.flash_attn,
        "gradient_checkpointing": config.training.gradient_checkpointing,
        "logging_steps": config.training.logging_steps,
        "save_steps": config.training.save_steps,
        "run_name": config.run_name,
    }


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
