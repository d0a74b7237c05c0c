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


class _FormReader:
    """Reads raw form values into typed values, collecting a finding per bad field."""

    def __init__(self, values: Mapping[str, Any]):
        self.values = values
        self.findings: list[Finding] = []

    def raw(self, name: str) -> Any:
        value = self.values.get(name, FORM_DEFAULTS.get(name))
        return value.strip() if isinstance(value, str) else value

    def text(self, name: str) -> str:
        value = self.raw(name)
        return "" if value is None else str(value)

    def number(self, name: str, kind: type, what: str) -> Any:
        value = self.raw(name)
        try:
            if isinstance(value, bool) or value is None or value == "":
                raise ValueError
            number = float(value)
            if not math.isfinite(number):
                raise ValueError
            if kind is int:
                if number != int(number):
                    raise ValueError
                return int(number)
            return number
        except (TypeError, ValueError):
            self.findings.append(
                Finding(
                    key=name,
                    problem=f"{what} must be {'a whole number' if kind is int else 'a number'}, not {value!r}.",
                    fix=f"Enter {'a whole number' if kind is int else 'a number'} for {what}.",
                    rule="not-a-number",
                )
            )
            return FORM_DEFAULTS[name]

    def choice(self, name: str, choices: tuple[str, ...], what: str) -> str:
        value = self.text(name)
        if value not in choices:
            self.findings.append(
                Finding(
                    key=name,
                    problem=f"{what} {value!r} is not one of {', '.join(choices)}.",
                    fix=f"Pick one of {', '.join(choices)} for {what}.",
                    rule="bad-choice",
                )
            )
            return FORM_DEFAULTS[name]
        return value


def parse_quantization(value: Any) -> int | None:
    text = str(value).strip().lower()
    if text in ("", "none", "0", "no", "off"):
        return None
    return int(float(text))


def parse_form(values: Mapping[str, Any], preset_env: tuple[tuple[str, str], ...] = (), use_cpu: bool = False) -> tuple[RunConfig, list[Finding]]:
    """Typed config from raw form values. Fields that do not parse get a finding each and
    fall back to their default, so the caller can show every problem at once."""
    form = _FormReader(values)
    datasets = tuple(d.strip() for d in re.split(r"[,\s]+", form.text("dataset")) if d.strip())
    try:
        quantization_bit = parse_quantization(form.raw("quantization_bit"))
        if quantization_bit not in QUANTIZATION_BITS:
            raise ValueError
    except (TypeError, ValueError):
        form.findings.append(
            Finding("quantization_bit", f"Quantization {form.raw('quantization_bit')!r} is not none, 8 or 4.", "Pick none, 8 or 4.", rule="bad-choice")
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
            gradient_checkpointing=bool(form.raw("gradient_checkpointing")),
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
    "MethodSpec",
    "ModelSpec",
    "PrecisionSpec",
    "RunConfig",
    "TrainingSpec",
    "parse_form",
    "to_form",
    "to_llamafactory_args",
    "to_yaml",
]
