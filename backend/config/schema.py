"""The run form, declared once: every field's name, LLaMA-Factory key, default, choices,
range, widget and message ids, in one table.

Everything else derives from this table, at call time (so a test that adds a field to
RUN_FIELDS sees it everywhere): the defaults (`form_defaults`), form -> config and back
(backend/config/__init__.py `parse_form`, `to_form`), config -> YAML (`to_llamafactory_args`),
YAML -> form (backend/config/yaml_import.py), the ranges (`number_ranges`), the page's field list
and element ids (`page_fields`, `element_ids`; ui/train_tab.py builds its widgets from them),
a preset's values (backend/config/presets.py: any run field by name), a saved run read back
(backend/config/run_form.py), the runs table's columns (`Field.column`), what an evaluation
keeps of the run's YAML (`Field.predict`, backend/evaluate/plan.py), and the multi-GPU
plan's fields (PLAN_FIELDS, the typed `DistributedPlan` of
backend/config/distributed.py). Adding a field is one `Field(...)` line here plus its `label.<name>`
and `field.<name>` lines in each catalogue (backend/i18n/locales/*.yaml); a field without a
typed slot in RunConfig (`path=""`) lives in `RunConfig.extra` until a rule needs it typed.

Why frozen dataclasses and not a pydantic model: every value a user types must become a
*finding* (key, problem, fix, patch, words in any language) and fall back to its default,
every field at once, so the page can show all problems side by side and nothing downstream
ever sees an absurd value. Pydantic answers with one ValidationError whose messages are its
own English; mapping those back to our rules, ranges and message ids would cost more than
the plain parser of config.py, and a pydantic model cannot be extended by a test with one
line the way a tuple of records can. The table is data; config.py is its one reader.

This module imports nothing of RocBoard's: config.py, distributed.py, yaml_import.py and
the page all import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

# How config.py parses a field's raw value (and which finding a bad one gets).
# "optional_int": a whole number, or empty for None (max_samples: empty = every sample).
Kind = Literal["text", "int", "optional_int", "float", "choice", "flag", "datasets", "quantization", "gpus", "env_lines", "other_keys"]
# What the page builds for it (ui/train_tab.py maps each hint to a Gradio widget).
Widget = Literal["textbox", "lines", "number", "integer", "dropdown", "radio", "checkbox"]

TEXT_MAX_DEFAULT = 256  # characters of a text field without its own limit
DATASETS_MAX = 64  # datasets mixed in one run


@dataclass(frozen=True)
class NumberRange:
    """What a number may be. The bounds are generous for real use and refuse what can only
    be a typo or an attack: a value outside gets a finding naming the field, the range and a
    fix, and falls back to its default."""

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
        return f"{'(' if self.low_open else '['}{_number(self.low)}, {_number(self.high)}{')' if self.high_open else ']'}"


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


# --- how a field meets LLaMA-Factory's YAML --------------------------------------------------


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()  # what a codec's `read` returns when the YAML does not set the field


@dataclass(frozen=True)
class YamlCodec:
    """How a field's typed value becomes LLaMA-Factory keys, and how a YAML sets it back.

    `write(value, values)` gets the field's typed value and every field's typed value by
    name (a LoRA key is written only for LoRA); `read(args)` gives the form value the YAML
    mapping sets, or ABSENT; `patch(value)` rewrites a fix in form terms into YAML keys
    (None removes a key). `keys[0]` is the key a finding about the field is shown under."""

    keys: tuple[str, ...]
    write: Callable[[Any, Mapping[str, Any]], dict[str, Any]]
    read: Callable[[Mapping[str, Any]], Any]
    patch: Callable[[Any], dict[str, Any]]


def plain(key: str, *, lists_joined: bool = False, only_for_lora: bool = False, written: bool = True) -> YamlCodec:
    """The value under one key, as is. `lists_joined`: a YAML list (`dataset: [a, b]`) is read
    as "a,b", and the typed tuple is written so; `only_for_lora`: written only when the method is LoRA; `written`: False for a
    key the form imports but RocBoard does not write (run_name: output_dir says it)."""

    def write(value: Any, values: Mapping[str, Any]) -> dict[str, Any]:
        if not written or (only_for_lora and values.get("finetuning_type") != "lora"):
            return {}
        return {key: ",".join(value) if lists_joined and isinstance(value, (list, tuple)) else value}

    def read(args: Mapping[str, Any]) -> Any:
        value = args.get(key, ABSENT)
        return ",".join(map(str, value)) if lists_joined and isinstance(value, list) else value

    return YamlCodec((key,), write, read, lambda value: {key: value})


def _read_quantization(args: Mapping[str, Any]) -> Any:
    if "quantization_bit" not in args:
        return ABSENT
    return "none" if args["quantization_bit"] is None else str(args["quantization_bit"])


QUANTIZATION = YamlCodec(
    ("quantization_bit",),
    # QLoRA: LLaMA-Factory quantizes with bitsandbytes ("bnb") unless told otherwise.
    lambda value, _: {} if value is None else {"quantization_bit": value, "quantization_method": "bnb"},
    _read_quantization,
    lambda value: {"quantization_bit": None if str(value) == "none" else int(value)},
)


def _read_max_steps(args: Mapping[str, Any]) -> Any:
    value = args.get("max_steps", ABSENT)
    # LLaMA-Factory's -1 and the form's 0 both mean "train by epochs".
    return 0 if isinstance(value, int) and not isinstance(value, bool) and value == -1 else value


MAX_STEPS = YamlCodec(
    ("max_steps",),
    lambda value, _: {"max_steps": value} if value > 0 else {},
    _read_max_steps,
    lambda value: {"max_steps": None if value == 0 else value},
)

# LLaMA-Factory turns gradient checkpointing on unless told not to.
GRADIENT_CHECKPOINTING = YamlCodec(
    ("disable_gradient_checkpointing",),
    lambda value, _: {} if value else {"disable_gradient_checkpointing": True},
    lambda args: args["disable_gradient_checkpointing"] is not True if "disable_gradient_checkpointing" in args else ABSENT,
    lambda value: {"disable_gradient_checkpointing": None if value else True},
)

PRECISION_KEYS = ("bf16", "fp16", "pure_bf16")
# Without bf16/fp16 LLaMA-Factory trains in fp32: an imported file always sets the form's
# precision, never leaves its default.
PRECISION = YamlCodec(
    PRECISION_KEYS,
    lambda value, _: {"bf16": value == "bf16", "fp16": value == "fp16"},
    lambda args: "bf16" if args.get("bf16") is True or args.get("pure_bf16") is True else "fp16" if args.get("fp16") is True else "fp32",
    lambda value: {"bf16": True if value == "bf16" else None, "fp16": True if value == "fp16" else None, "pure_bf16": None},
)


# Warmup: transformers 4 lets `warmup_steps` > 0 override `warmup_ratio`; transformers 5 lets a
# set `warmup_ratio` override `warmup_steps`. RocBoard writes at most one of the two, so the run
# warms up the same under either: the steps when > 0 (the form says they win), else the ratio
# when > 0, else neither (no warmup, both libraries' default).
WARMUP_RATIO = YamlCodec(
    ("warmup_ratio",),
    lambda value, values: {"warmup_ratio": value} if value > 0 and not values.get("warmup_steps") else {},
    lambda args: args.get("warmup_ratio", ABSENT),
    lambda value: {"warmup_ratio": value or None},
)
WARMUP_STEPS = YamlCodec(
    ("warmup_steps",),
    lambda value, _: {"warmup_steps": value} if value > 0 else {},
    lambda args: args.get("warmup_steps", ABSENT),
    lambda value: {"warmup_steps": value or None},
)
# The training stages (LLaMA-Factory's `stage`). The form offers what trains from a dataset and a
# model alone; ppo also needs a reward model (`reward_model`), so LLaMA-Factory takes it and the
# form does not offer it (an imported `stage: ppo` is a warning).
STAGES: tuple[str, ...] = ("pt", "sft", "rm", "dpo", "kto")
STAGES_LLAMAFACTORY_ONLY: tuple[str, ...] = ("ppo",)
PREFERENCE_STAGES: frozenset[str] = frozenset({"dpo", "kto"})  # the stages that read pref_*
# LLaMA-Factory's `pref_loss` (RLHFArguments in llamafactory/hparams/finetuning_args.py): DPO's loss.
PREF_LOSSES: tuple[str, ...] = ("sigmoid", "hinge", "ipo", "kto_pair", "orpo", "simpo")


def only_for_stages(key: str, stages: frozenset[str]) -> YamlCodec:
    """The value under one key, written only when the form's stage is one of `stages` (as
    `plain(only_for_lora=True)` does for LoRA): an sft run's YAML carries no DPO beta."""

    def write(value: Any, values: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value} if values.get("stage") in stages else {}

    return YamlCodec((key,), write, lambda args: args.get(key, ABSENT), lambda value: {key: value})


# Empty (None) = every sample: the key is left out, as LLaMA-Factory's own default.
MAX_SAMPLES = YamlCodec(
    ("max_samples",),
    lambda value, _: {} if value is None else {"max_samples": value},
    lambda args: "" if args.get("max_samples", ABSENT) is None else args.get("max_samples", ABSENT),
    lambda value: {"max_samples": None if value in (None, "") else value},
)


# --- holding data out for evaluation, and the experiment trackers ------------------------------
# LLaMA-Factory's `val_size` (llamafactory/data/data_utils.py split_dataset): a float in (0, 1) is
# the fraction of the dataset held out, a number above 1 a count of examples (`int(val_size)`);
# 0 = no split. The form's 0 writes no key (LLaMA-Factory's own default).
def _write_val_size(value: Any, _: Mapping[str, Any]) -> dict[str, Any]:
    if not value:
        return {}
    return {"val_size": int(value) if value >= 1 and value == int(value) else value}


VAL_SIZE = YamlCodec(
    ("val_size",),
    _write_val_size,
    lambda args: args.get("val_size", ABSENT),
    lambda value: {"val_size": value or None},
)
EVAL_STRATEGIES: tuple[str, ...] = ("no", "steps", "epoch")


def _evaluates(values: Mapping[str, Any]) -> bool:
    return values.get("eval_strategy") in ("steps", "epoch")


# "no" (transformers' default) writes no key. The form's default stays "no" even when val_size
# > 0: the YAML says exactly what the form says, and checks.py rule_evaluation warns (with a
# one-click patch to "steps") when data is held out and nothing evaluates it.
EVAL_STRATEGY = YamlCodec(
    ("eval_strategy",),
    lambda value, _: {"eval_strategy": value} if value != "no" else {},
    lambda args: args.get("eval_strategy", ABSENT),
    lambda value: {"eval_strategy": None if value == "no" else value},
)
# Written only when the run evaluates every N steps.
EVAL_STEPS = YamlCodec(
    ("eval_steps",),
    lambda value, values: {"eval_steps": value} if values.get("eval_strategy") == "steps" else {},
    lambda args: args.get("eval_steps", ABSENT),
    lambda value: {"eval_steps": value},
)
# 0 = the training batch size (evaluation keeps no gradients or optimizer state, so what fits
# for training fits for evaluation); written only when the run evaluates.
EVAL_BATCH_SIZE = YamlCodec(
    ("per_device_eval_batch_size",),
    lambda value, values: {"per_device_eval_batch_size": value or values.get("batch_size") or 1} if _evaluates(values) else {},
    lambda args: args.get("per_device_eval_batch_size", ABSENT),
    lambda value: {"per_device_eval_batch_size": value or None},
)
# transformers' `report_to` (LLaMA-Factory passes it on): one tracker, or none. Each writes its
# logs under the run directory (the trainer's working directory: ./wandb, ./swanlog, ./mlruns;
# TensorBoard under output_dir/runs). No tracker is given a secret (backend/security/child_env.py
# never passes an API key to a child): wandb and SwanLab run offline (child_env's
# TRACKER_OFFLINE_ENV), their logs synced later with `wandb sync` / `swanlab sync`.
TRACKERS: tuple[str, ...] = ("none", "tensorboard", "wandb", "mlflow", "swanlab")
# Each tracker's packages, any one of which transformers' callback imports (the checks and the
# doctor look them up with importlib.util.find_spec, never importing them).
TRACKER_PACKAGES: dict[str, tuple[str, ...]] = {
    "tensorboard": ("tensorboard", "tensorboardX"),
    "wandb": ("wandb",),
    "mlflow": ("mlflow",),
    "swanlab": ("swanlab",),
}
TRACKERS_LLAMAFACTORY_ONLY: tuple[str, ...] = ("all", "trackio", "comet_ml", "clearml", "neptune", "dvclive", "azure_ml", "codecarbon", "dagshub", "flyte")


def _read_report_to(args: Mapping[str, Any]) -> Any:
    value = args.get("report_to", ABSENT)
    if isinstance(value, list) and len(value) == 1:
        return value[0]  # `report_to: [wandb]`
    if isinstance(value, list) and not value:
        return "none"
    return "none" if value is None else value


REPORT_TO = YamlCodec(
    ("report_to",),
    lambda value, _: {"report_to": value},  # always written: "none" switches transformers' "all" off
    _read_report_to,
    lambda value: {"report_to": value},
)


# Keys a run's YAML always gets from RocBoard (where it runs, that it trains, the launch plan's
# timeout): never from "Other keys", never from an import.
# trust_remote_code too: a model folder's own Python code is never run (docs/security.md).
ROCBOARD_OWNED_KEYS = frozenset({"do_train", "output_dir", "overwrite_output_dir", "resume_from_checkpoint", "use_cpu", "ddp_timeout", "trust_remote_code"})
OTHER_KEYS_MAX = 256  # more keys than LLaMA-Factory has
# What RocBoard writes when Other keys does not say otherwise (backend/config/__init__.py
# to_llamafactory_args): an import that says the same keeps nothing in Other keys for them.
ROCBOARD_DEFAULTS: dict[str, Any] = {"stage": "sft", "plot_loss": True, "include_num_input_tokens_seen": True, "quantization_method": "bnb"}


def _read_other_keys(args: Mapping[str, Any]) -> Any:
    """The keys of an imported YAML that LLaMA-Factory knows and no field of the form reads:
    kept, as YAML text, in "Other keys" (an unknown key has its own finding; RocBoard's own
    keys are its to write)."""
    import yaml

    from backend.llama_factory.check import static_names

    known, in_form = static_names().keys, yaml_keys_in_form()
    kept = {
        key: value
        for key, value in args.items()
        if key in known and key not in in_form and key not in ROCBOARD_OWNED_KEYS and ROCBOARD_DEFAULTS.get(key, ABSENT) != value
    }
    if not kept:
        return ABSENT
    return yaml.safe_dump(kept, sort_keys=False, allow_unicode=True, default_flow_style=False)


OTHER_KEYS = YamlCodec(
    ("other_keys",),  # no LLaMA-Factory key of its own: findings about it are shown under its name
    # The typed value is a tuple of (key, value) pairs (backend/config/__init__.py _other_keys).
    lambda value, values: dict(value or ()),
    _read_other_keys,
    lambda value: {},
)


# --- a field ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One field of the run form (or of its multi-GPU plan)."""

    name: str  # the form's name: the key of form values, findings and form.json
    kind: Kind
    default: Any  # the form value before anyone touches it
    yaml_key: str | None = None  # the LLaMA-Factory key; None: not in the YAML
    codec: YamlCodec | None = None  # how it meets the YAML when not `plain(yaml_key)`
    path: str = ""  # where the typed value lives: "training.learning_rate"; "" = RunConfig.extra
    choices: tuple[Any, ...] = ()  # what the form offers (kind "choice", a dropdown's values)
    choice_labels: tuple[tuple[str, Any], ...] = ()  # (message id, value): the words a dropdown shows instead
    llamafactory_choices: tuple[Any, ...] = ()  # what LLaMA-Factory also accepts, the form does not offer
    range: NumberRange | None = None  # a number's bounds (a GPU list's: each index)
    max_chars: int = TEXT_MAX_DEFAULT  # a text's length limit
    widget: Widget = "textbox"
    section: str = ""  # the page's accordion ("" = above them all)
    row: str = ""  # fields with the same tag, one after the other, share a row on the page
    element_id: str = ""  # the page's element id; "" = the name in kebab-case
    help_id: str = ""  # a message id shown under the widget, if any
    blank_is_default: bool = False  # an emptied text means the default, not ""
    # The runs table's column that shows it (backend/runs/history.py; header runs.column.<column>,
    # else the field's label); "" = none. Fields with one column share it (epochs / max steps).
    column: str = ""
    # What an evaluation's predict run (backend/evaluate/plan.py) keeps of its YAML keys: "kept"
    # (how the model loads and the data reads, as it trained), "split" (which rows the training
    # held out: only for its validation split), "" = the training's alone.
    predict: Literal["", "kept", "split"] = ""

    @property
    def label_id(self) -> str:
        """The message id of the page's label."""
        return f"label.{self.name}"

    @property
    def noun_id(self) -> str:
        """The message id of the field's name inside messages ("Batch size")."""
        return f"field.{self.name}"

    @property
    def elem_id(self) -> str:
        return self.element_id or self.name.replace("_", "-")

    @property
    def yaml(self) -> YamlCodec | None:
        if self.codec is not None:
            return self.codec
        return plain(self.yaml_key) if self.yaml_key else None

    @property
    def all_choices(self) -> tuple[Any, ...]:
        """Every value LLaMA-Factory accepts: the form's own first."""
        return self.choices + self.llamafactory_choices


# --- the run form ----------------------------------------------------------------------------

PRECISIONS: tuple[str, ...] = ("bf16", "fp16", "fp32")
FINETUNING_TYPES: tuple[str, ...] = ("lora", "freeze", "full")
QUANTIZATION_BITS: tuple[int | None, ...] = (None, 8, 4)
# LLaMA-Factory's choices, in its own order; "fa3" needs a kernel ROCm builds lack, so the
# form does not offer it (an imported `flash_attn: fa3` is a warning, not an error).
FLASH_ATTN_CHOICES: tuple[str, ...] = ("auto", "disabled", "sdpa", "fa2")
FLASH_ATTN_LLAMAFACTORY_ONLY: tuple[str, ...] = ("fa3",)

# transformers' SchedulerType. The form offers those that need nothing more than a warmup;
# LLaMA-Factory also takes the rest, which need lr_scheduler_kwargs (min_lr, the decay steps)
# or an evaluation strategy (reduce_lr_on_plateau), so an imported one is a warning.
LR_SCHEDULERS: tuple[str, ...] = ("cosine", "linear", "constant", "constant_with_warmup", "cosine_with_restarts", "polynomial", "inverse_sqrt")
LR_SCHEDULERS_LLAMAFACTORY_ONLY: tuple[str, ...] = ("reduce_lr_on_plateau", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay", "greedy")
# transformers' OptimizerNames. The form offers plain PyTorch / transformers optimizers, which
# run on ROCm and on the CPU alike; bitsandbytes' 8-bit and paged ones need a ROCm build of
# bitsandbytes (and no CPU), the others extra packages or other hardware: LLaMA-Factory takes
# them, the form does not offer them (an imported one is a warning).
OPTIMIZERS: tuple[str, ...] = ("adamw_torch", "adamw_torch_fused", "adafactor", "sgd")
OPTIMIZERS_LLAMAFACTORY_ONLY: tuple[str, ...] = (
    "adagrad", "rmsprop", "adamw_torch_4bit", "adamw_torch_8bit", "adamw_anyprecision", "ademamix", "stable_adamw",
    "adamw_bnb_8bit", "adamw_8bit", "ademamix_8bit", "lion_8bit", "lion_32bit", "paged_adamw_32bit", "paged_adamw_8bit",
    "paged_ademamix_32bit", "paged_ademamix_8bit", "paged_lion_32bit", "paged_lion_8bit", "rmsprop_bnb", "rmsprop_bnb_8bit",
    "rmsprop_bnb_32bit", "galore_adamw", "galore_adamw_8bit", "galore_adafactor", "galore_adamw_layerwise",
    "galore_adamw_8bit_layerwise", "galore_adafactor_layerwise", "lomo", "adalomo", "grokadamw", "schedule_free_radam",
    "schedule_free_adamw", "schedule_free_sgd", "apollo_adamw", "apollo_adamw_layerwise",
    "adamw_torch_xla", "adamw_torch_npu_fused", "adamw_apex_fused",
)

_BIG = 1_000_000_000
SEED_MAX = 2**32 - 1  # numpy's seed is 32-bit; transformers seeds numpy with it

# In page order, which is also the YAML's order.
RUN_FIELDS: tuple[Field, ...] = (
    Field("preset", "text", "cpu-demo", path="hardware.preset", max_chars=64, widget="dropdown"),
    Field("model_path", "text", "", "model_name_or_path", path="model.model_name_or_path", max_chars=4096, predict="kept"),  # PATH_MAX
    Field("template", "text", "llama3", "template", path="model.template", max_chars=64, predict="kept"),
    Field("dataset_dir", "text", "", "dataset_dir", path="data.dataset_dir", max_chars=4096, row="data", predict="split"),
    Field("dataset", "datasets", "", "dataset", codec=plain("dataset", lists_joined=True), path="data.datasets", max_chars=4096, row="data", column="dataset", predict="split"),
    # Held out for evaluation: a fraction in [0, 1) or a count of examples >= 2 (checks.py rule_val_size).
    Field("val_size", "float", 0.0, "val_size", codec=VAL_SIZE, range=NumberRange(0, _BIG, 0.1, rule="val-size-range"), widget="number", row="data", predict="split"),
    # What is trained: pre-training on text, supervised fine-tuning, a reward model, or a preference
    # method (DPO, KTO). The pref_* fields below are written only for dpo / kto.
    Field("stage", "choice", "sft", "stage", path="method.stage", choices=STAGES, llamafactory_choices=STAGES_LLAMAFACTORY_ONLY, widget="radio", section="method"),
    Field("finetuning_type", "choice", "lora", "finetuning_type", path="method.finetuning_type", choices=FINETUNING_TYPES, llamafactory_choices=("oft",), widget="radio", section="method",
        predict="kept"),
    # beyond 1024 a LoRA is no longer low-rank
    Field("lora_rank", "int", 8, "lora_rank", codec=plain("lora_rank", only_for_lora=True), path="method.lora_rank", range=NumberRange(1, 1024, 8, rule="lora-rank-range"), widget="integer",
        section="method", row="lora"),
    Field("lora_alpha", "int", 16, "lora_alpha", codec=plain("lora_alpha", only_for_lora=True), path="method.lora_alpha", range=NumberRange(1, 100_000, 16, rule="lora-alpha-range"), widget="integer",
        section="method", row="lora"),
    Field("lora_dropout", "float", 0.0, "lora_dropout", codec=plain("lora_dropout", only_for_lora=True), path="method.lora_dropout",
        range=NumberRange(0, 1, 0.0, rule="lora-dropout-range", high_open=True), widget="number", section="method", row="lora"),
    # Emptied, it means "all" (LLaMA-Factory's own default): an empty target trains nothing.
    Field("lora_target", "text", "all", "lora_target", codec=plain("lora_target", lists_joined=True, only_for_lora=True), path="method.lora_target", max_chars=1024, section="method",
        blank_is_default=True),
    Field("quantization_bit", "quantization", "none", "quantization_bit", codec=QUANTIZATION, path="method.quantization_bit", choices=("none", "8", "4"), widget="dropdown", section="method",
        predict="kept"),
    # DPO / KTO: the preference loss's beta (LLaMA-Factory's default 0.1; above 100 the policy cannot
    # move from the reference model), DPO's loss, and the weight of an added SFT loss on the chosen answer.
    Field("pref_beta", "float", 0.1, "pref_beta", codec=only_for_stages("pref_beta", PREFERENCE_STAGES), path="method.pref_beta", range=NumberRange(0, 100, 0.1, rule="pref-beta-range", low_open=True),
        widget="number", section="method", row="pref"),
    Field("pref_loss", "choice", "sigmoid", "pref_loss", codec=only_for_stages("pref_loss", frozenset({"dpo"})), path="method.pref_loss", choices=PREF_LOSSES, widget="dropdown", section="method",
        row="pref"),
    Field("pref_ftx", "float", 0.0, "pref_ftx", codec=only_for_stages("pref_ftx", PREFERENCE_STAGES), path="method.pref_ftx", range=NumberRange(0, 1000, 0.0, rule="pref-ftx-range"), widget="number",
        section="method", row="pref"),
    # A textbox, so "5e-5" can be typed. Above 1 no fine-tuning recipe trains: a typo for 1e-4 is likelier.
    Field("learning_rate", "float", 1e-4, "learning_rate", path="training.learning_rate",
        range=NumberRange(0, 1, 1e-4, rule="learning-rate-absurd", low_open=True, rule_low="learning-rate-not-positive"), section="training", row="length", column="learning_rate"),
    Field("max_steps", "int", 0, "max_steps", codec=MAX_STEPS, path="training.max_steps", range=NumberRange(0, _BIG, 0, rule="max-steps-range"), widget="integer", section="training", row="length",
        column="length"),  # 0 = train by epochs
    Field("num_train_epochs", "float", 3.0, "num_train_epochs", path="training.num_train_epochs", range=NumberRange(0, 1000, 3.0, rule="epochs-range"), widget="number", section="training",
        row="length", element_id="epochs", column="length"),
    # per device: no accelerator holds more activations
    Field("batch_size", "int", 1, "per_device_train_batch_size", path="training.per_device_train_batch_size", range=NumberRange(1, 1024, 1, rule="batch-size-range"), widget="integer",
        section="training", row="batch"),
    Field("grad_accum", "int", 8, "gradient_accumulation_steps", path="training.gradient_accumulation_steps", range=NumberRange(1, 100_000, 8, rule="grad-accum-range"), widget="integer",
        section="training", row="batch"),
    # 1M tokens: the longest contexts models have
    Field("cutoff_len", "int", 1024, "cutoff_len", path="data.cutoff_len", range=NumberRange(1, 1_048_576, 1024, rule="cutoff-range"), widget="integer", section="training", row="batch",
        predict="kept"),
    Field("precision", "choice", "bf16", "bf16", codec=PRECISION, path="precision.precision", choices=PRECISIONS, widget="radio", section="training", row="precision", predict="kept"),
    Field("flash_attn", "choice", "auto", "flash_attn", path="precision.flash_attn", choices=FLASH_ATTN_CHOICES, llamafactory_choices=FLASH_ATTN_LLAMAFACTORY_ONLY, widget="dropdown",
        section="training", row="precision", predict="kept"),
    Field("gradient_checkpointing", "flag", True, "disable_gradient_checkpointing", codec=GRADIENT_CHECKPOINTING, path="training.gradient_checkpointing", widget="checkbox", section="training",
        row="precision"),
    Field("lr_scheduler_type", "choice", "cosine", "lr_scheduler_type", path="training.lr_scheduler_type", choices=LR_SCHEDULERS, llamafactory_choices=LR_SCHEDULERS_LLAMAFACTORY_ONLY,
        widget="dropdown", section="training", row="schedule"),
    # A ratio of the training steps, or a number of steps; steps > 0 win (WARMUP_RATIO above).
    Field("warmup_ratio", "float", 0.0, "warmup_ratio", codec=WARMUP_RATIO, path="training.warmup_ratio", range=NumberRange(0, 1, 0.1, rule="warmup-ratio-range", high_open=True), widget="number",
        section="training", row="schedule"),
    Field("warmup_steps", "int", 0, "warmup_steps", codec=WARMUP_STEPS, path="training.warmup_steps", range=NumberRange(0, _BIG, 0, rule="warmup-steps-range"), widget="integer", section="training",
        row="schedule"),
    Field("optim", "choice", "adamw_torch", "optim", path="training.optim", choices=OPTIMIZERS, llamafactory_choices=OPTIMIZERS_LLAMAFACTORY_ONLY, widget="dropdown", section="training", row="optim"),
    Field("seed", "int", 42, "seed", path="training.seed", range=NumberRange(0, SEED_MAX, 42, rule="seed-range"), widget="integer", section="training", row="optim", predict="kept"),
    # A textbox, so it can be emptied: empty = every sample.
    Field("max_samples", "optional_int", "", "max_samples", codec=MAX_SAMPLES, path="data.max_samples", range=NumberRange(1, _BIG, 1000, rule="max-samples-range"), section="training", row="optim",
        predict="split"),
    Field("logging_steps", "int", 10, "logging_steps", path="training.logging_steps", range=NumberRange(1, _BIG, 10, rule="logging-steps-range"), widget="integer", section="training", row="steps"),
    Field("save_steps", "int", 500, "save_steps", path="training.save_steps", range=NumberRange(1, _BIG, 500, rule="save-steps-range"), widget="integer", section="training", row="steps"),
    # the run-name rule asks for 64; a longer one still gets that rule's fix
    Field("run_name", "text", "", "run_name", codec=plain("run_name", written=False), path="run_name", section="training", row="steps"),
    # Evaluation on the held-out data (val_size): when, how often, and how many examples at once.
    Field("eval_strategy", "choice", "no", "eval_strategy", codec=EVAL_STRATEGY, choices=EVAL_STRATEGIES, widget="dropdown", section="training", row="eval"),
    Field("eval_steps", "int", 50, "eval_steps", codec=EVAL_STEPS, range=NumberRange(1, _BIG, 50, rule="eval-steps-range"), widget="integer", section="training", row="eval"),
    Field("per_device_eval_batch_size", "int", 0, "per_device_eval_batch_size", codec=EVAL_BATCH_SIZE, range=NumberRange(0, 1024, 0, rule="eval-batch-size-range"), widget="integer",
        section="training", row="eval"),
    Field("report_to", "choice", "none", "report_to", codec=REPORT_TO, choices=TRACKERS, llamafactory_choices=TRACKERS_LLAMAFACTORY_ONLY, widget="dropdown", section="training", row="eval"),
    # Every other LLaMA-Factory key, as YAML lines: checked against LLaMA-Factory's own list and
    # written to the run's YAML after the form's keys. An import keeps here what the form lacks.
    Field("other_keys", "other_keys", "", codec=OTHER_KEYS, max_chars=65_536, widget="lines", section="other_keys"),
)


# --- the multi-GPU plan: a typed sub-model (backend/config/distributed.py DistributedPlan) -------------

DEFAULT_MASTER_PORT = 29500  # torchrun's own default; used where no free port can be probed
# Long enough for rank 0 to tokenize a large dataset while the other ranks wait at a barrier
# (LLaMA-Factory prepares data on the main process first); short enough that a dead peer
# fails the job within the hour instead of holding every GPU forever. Transformers' default
# is 1800 s; LLaMA-Board uses 180000000 s (never).
DEFAULT_DDP_TIMEOUT_S = 3600
# RCCL reads NCCL_* variables (it is a port of NCCL and keeps its names). PyTorch's
# process group reads TORCH_NCCL_* for both NCCL and RCCL.
DEFAULT_RCCL_ENV: tuple[tuple[str, str], ...] = (
    # Init failures and fallbacks are printed to train.log; INFO adds topology and rings.
    ("NCCL_DEBUG", "WARN"),
    # A failed or timed-out collective tears the process down (and torchrun then ends the
    # job) instead of leaving every other rank blocked in an all-reduce.
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
)
STRATEGIES: tuple[str, ...] = ("ddp", "zero2", "zero3")
GPUS_PER_NODE_MAX = 64  # MI300X in CPX mode shows 8 x 8 = 64 GPUs; 8 is usual
NODES_MAX = 1024
DDP_TIMEOUT_MAX_S = 7 * 24 * 3600  # a week: longer is a hang nobody is watching

# Prefixed with dist_ so they never collide with RUN_FIELDS; `path` names DistributedPlan's
# attribute. They are not YAML keys: distributed.extra_args writes what the plan adds.
PLAN_FIELDS: tuple[Field, ...] = (
    Field("dist_nproc", "int", 1, path="nproc", range=NumberRange(1, GPUS_PER_NODE_MAX, 1, rule="nproc-range"), widget="integer", section="multi_gpu", row="workers"),
    # the range bounds each index of the list
    Field("dist_gpus", "gpus", "0", path="gpus", range=NumberRange(0, GPUS_PER_NODE_MAX - 1, 0, rule="gpu-index-range"), max_chars=1024, section="multi_gpu", row="workers"),
    Field("dist_strategy", "choice", "ddp", path="strategy", choices=STRATEGIES, choice_labels=tuple((f"strategy.{key}", key) for key in STRATEGIES), widget="dropdown", section="multi_gpu",
        row="workers"),
    Field("dist_offload", "flag", False, path="offload", widget="checkbox", section="multi_gpu", row="zero"),
    Field("dist_ddp_timeout_s", "int", DEFAULT_DDP_TIMEOUT_S, path="ddp_timeout_s", range=NumberRange(1, DDP_TIMEOUT_MAX_S, 3600, rule="bad-timeout"), widget="integer", section="multi_gpu",
        row="zero"),
    Field("dist_rccl_env", "env_lines", "\n".join(f"{k}={v}" for k, v in DEFAULT_RCCL_ENV), path="rccl_env", max_chars=65_536, widget="lines", section="multi_gpu"),
    Field("dist_nnodes", "int", 1, path="nnodes", range=NumberRange(1, NODES_MAX, 1, rule="nnodes-range"), widget="integer", section="multi_gpu", row="nodes"),
    Field("dist_node_rank", "int", 0, path="node_rank", range=NumberRange(0, NODES_MAX - 1, 0, rule="node-rank-range"), widget="integer", section="multi_gpu", row="nodes"),
    # 253: the longest DNS name; an address goes into every node's command line.
    Field("dist_master_addr", "text", "127.0.0.1", path="master_addr", max_chars=253, section="multi_gpu", row="nodes"),
    Field("dist_master_port", "int", DEFAULT_MASTER_PORT, path="master_port", range=NumberRange(1, 65535, 29500, rule="bad-port"), widget="integer", section="multi_gpu", row="nodes"),
)



# --- where the run executes: a typed choice (backend/config/placement.py Placement) -------------

# "local": this machine (the launcher starts the trainer here); "slurm": a batch job on a Slurm
# cluster whose nodes see the runs directory (backend/slurm/).
RUN_ON: tuple[str, ...] = ("local", "slurm")
LOCAL_GPUS_MAX_CHARS = 256  # "0,1,...,63" is 182 characters
SLURM_CPUS_MAX = 4096  # CPUs of one task (one per node: torchrun starts the node's workers)
SBATCH_EXTRA_MAX_LINES = 32

# Prefixed with slurm_ (or local_, for this machine) so they never collide with RUN_FIELDS or
# PLAN_FIELDS; `path` names the attribute of SlurmPlacement (LocalPlacement). Empty text and 0 mean "the cluster's default" (sbatch is not
# given the option). Not YAML keys: they become #SBATCH lines (backend/slurm/script.py).
PLACEMENT_FIELDS: tuple[Field, ...] = (
    Field("run_on", "choice", "local", path="kind", choices=RUN_ON, choice_labels=tuple((f"run_on.{key}", key) for key in RUN_ON), widget="radio", section="placement"),
    # This machine: the GPUs the run asks for by index ("0,1"; empty: the node picks free ones,
    # as many as the multi-GPU plan lists). Checked against the node and the plan at Start.
    Field("local_gpus", "gpus", "", path="gpus", range=NumberRange(0, GPUS_PER_NODE_MAX - 1, 0, rule="gpu-index-range"), max_chars=LOCAL_GPUS_MAX_CHARS, section="placement"),
    Field("slurm_partition", "text", "", path="partition", max_chars=64, section="placement", row="slurm_where"),
    Field("slurm_account", "text", "", path="account", max_chars=64, section="placement", row="slurm_where"),
    Field("slurm_time", "text", "", path="time_limit", max_chars=32, section="placement", row="slurm_where"),
    Field("slurm_nodes", "int", 1, path="nodes", range=NumberRange(1, NODES_MAX, 1, rule="slurm-nodes-range"), widget="integer", section="placement", row="slurm_size"),
    Field("slurm_gpus_per_node", "int", 0, path="gpus_per_node", range=NumberRange(0, GPUS_PER_NODE_MAX, 1, rule="slurm-gpus-range"), widget="integer", section="placement", row="slurm_size"),
    Field("slurm_cpus_per_task", "int", 0, path="cpus_per_task", range=NumberRange(0, SLURM_CPUS_MAX, 8, rule="slurm-cpus-range"), widget="integer", section="placement", row="slurm_size"),
    Field("slurm_mem", "text", "", path="memory", max_chars=32, section="placement", row="slurm_size"),
    # More #SBATCH lines, one option a line, each checked against the options RocBoard passes on
    # (backend/config/placement.py SBATCH_EXTRA_OPTIONS).
    Field("slurm_extra", "text", "", path="extra", max_chars=8192, widget="lines", section="placement"),
)


# --- what derives from the table (read at call time: a test may add a field) ---------------------


def run_fields() -> tuple[Field, ...]:
    return RUN_FIELDS


def plan_fields() -> tuple[Field, ...]:
    return PLAN_FIELDS


def placement_fields() -> tuple[Field, ...]:
    return PLACEMENT_FIELDS


def page_fields() -> tuple[Field, ...]:
    """Every field the page shows, in its order: the run's, the plan's, where it runs."""
    return run_fields() + plan_fields() + placement_fields()


def field(name: str) -> Field:
    """The field called `name` (KeyError for none)."""
    for candidate in page_fields():
        if candidate.name == name:
            return candidate
    raise KeyError(name)


def form_defaults() -> dict[str, Any]:
    """The run form's values before anyone touches it."""
    return {f.name: f.default for f in run_fields()}


def plan_form_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in plan_fields()}


def placement_form_defaults() -> dict[str, Any]:
    return {f.name: f.default for f in placement_fields()}


def side_form_defaults() -> dict[str, Any]:
    """The defaults of the page's fields beside the run's own: the plan's and where it runs."""
    return {**plan_form_defaults(), **placement_form_defaults()}


def number_ranges() -> dict[str, NumberRange]:
    """Every number's bounds, by field name (the form's and the plan's)."""
    return {f.name: f.range for f in page_fields() if f.range is not None}


def text_limits() -> dict[str, int]:
    return {f.name: f.max_chars for f in page_fields() if f.kind in ("text", "datasets", "gpus", "env_lines")}


def form_to_yaml() -> dict[str, str]:
    """Form field -> the LLaMA-Factory key a finding about it is shown under."""
    return {f.name: f.yaml.keys[0] for f in run_fields() if f.yaml is not None}


def yaml_keys_in_form() -> frozenset[str]:
    """Every LLaMA-Factory key some field of the form reads."""
    return frozenset(key for f in run_fields() if f.yaml is not None for key in f.yaml.keys)


def element_ids() -> dict[str, str]:
    """The page's element id of each field (tests and automation rely on them)."""
    return {f.name: f.elem_id for f in page_fields()}


__all__ = [
    "ABSENT",
    "DATASETS_MAX",
    "DEFAULT_DDP_TIMEOUT_S",
    "DEFAULT_MASTER_PORT",
    "DEFAULT_RCCL_ENV",
    "EVAL_STRATEGIES",
    "FINETUNING_TYPES",
    "FLASH_ATTN_CHOICES",
    "LR_SCHEDULERS",
    "OPTIMIZERS",
    "PREF_LOSSES",
    "PREFERENCE_STAGES",
    "STAGES",
    "Field",
    "NumberRange",
    "PLAN_FIELDS",
    "PLACEMENT_FIELDS",
    "RUN_ON",
    "PRECISIONS",
    "QUANTIZATION_BITS",
    "RUN_FIELDS",
    "STRATEGIES",
    "TRACKERS",
    "TRACKER_PACKAGES",
    "YamlCodec",
    "element_ids",
    "field",
    "form_defaults",
    "form_to_yaml",
    "number_ranges",
    "page_fields",
    "plain",
    "plan_fields",
    "plan_form_defaults",
    "placement_fields",
    "placement_form_defaults",
    "side_form_defaults",
    "text_limits",
    "yaml_keys_in_form",
]
