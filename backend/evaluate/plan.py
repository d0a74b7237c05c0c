"""The evaluation's LLaMA-Factory arguments: LLaMA-Factory's predict mode (`do_predict`,
`predict_with_generate`) with a trained run's adapter on held-out data.

Built from the arguments the trained run's form gives today (backend/service/pipeline.py
`run_args`, so its checks, presets and environment apply): the model, template, fine-tuning
type, cutoff and hardware keys are kept, the training keys are dropped, the predict keys added.

The held-out data is one of two things:
- a dataset (`eval_dataset` + `dataset_dir`): every row LLaMA-Factory reads of it, the first
  `max_samples` of them;
- the trained run's validation split: LLaMA-Factory 0.9.5 splits `dataset` with
  `train_test_split(test_size=val_size, seed=seed)` after reading at most `max_samples` rows of
  it (data/loader.py, data/data_utils.py `split_dataset`), and with `do_predict` predicts on
  that "validation" part. Giving the predict run the training's own `dataset`, `val_size`,
  `seed` and `max_samples` therefore reproduces exactly the rows the training held out, as
  long as the dataset's file is unchanged. The evaluation's own sample limit cannot apply
  there (a different `max_samples` would split other rows): the whole split is predicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.config import schema

# Bounds of the page's numbers.
MAX_SAMPLES_DEFAULT = 50
MAX_SAMPLES_LIMIT = 10_000
MAX_NEW_TOKENS_DEFAULT = 64
MAX_NEW_TOKENS_LIMIT = 4096
EVAL_BATCH_DEFAULT = 4
EVAL_BATCH_LIMIT = 64

# The dataset choice that means "the trained run's validation split".
VALIDATION_SPLIT = "validation"

# What a predict run keeps of the training's arguments: what loads the model as it trained,
# and what reads the data as it trained. The rest (learning rate, LoRA shape, saving,
# logging, eval strategy, DeepSpeed, trackers) is the training's alone. A form field says
# which it is (backend/config/schema.py `Field.predict`); these are the keys no field owns
# (RocBoard's own, a codec's second key, Other keys LLaMA-Factory reads the model or data by).
KEPT_OTHER_KEYS: tuple[str, ...] = ("trust_remote_code", "use_cpu", "quantization_method", "double_quantization", "rope_scaling", "enable_thinking", "preprocessing_num_workers")
# ... and for the validation split, the keys that decide which rows were held out.
SPLIT_OTHER_KEYS: tuple[str, ...] = ("mix_strategy", "interleave_probs", "streaming", "buffer_size")


def _field_keys(which: str) -> tuple[str, ...]:
    return tuple(key for f in schema.run_fields() if f.predict == which and f.yaml is not None for key in f.yaml.keys)


def kept_keys() -> tuple[str, ...]:
    """The training's keys every predict run keeps (read at call time: a test may add a field)."""
    return _field_keys("kept") + KEPT_OTHER_KEYS


def split_keys() -> tuple[str, ...]:
    """The keys a predict run on the validation split keeps besides (the kept ones, seed among them, too)."""
    return _field_keys("split") + SPLIT_OTHER_KEYS


@dataclass(frozen=True)
class HeldOut:
    """The held-out data: a dataset `name` in `dataset_dir`, or the validation split."""

    dataset_dir: str
    name: str  # VALIDATION_SPLIT for the trained run's split

    @property
    def is_split(self) -> bool:
        return self.name == VALIDATION_SPLIT and not self.dataset_dir


def predict_args(
    train_args: dict[str, Any],
    adapter_dir: str,
    held_out: HeldOut,
    output_dir: str,
    max_samples: int,
    max_new_tokens: int,
    batch_size: int,
) -> dict[str, Any]:
    """The predict run's YAML arguments, from the trained run's arguments `train_args` (as
    `ConfigPipeline.run_args` gives them)."""
    args: dict[str, Any] = {"stage": "sft", "do_train": False, "do_predict": True, "predict_with_generate": True}
    args.update({key: train_args[key] for key in kept_keys() if key in train_args})
    args["adapter_name_or_path"] = adapter_dir
    if held_out.is_split:
        args.update({key: train_args[key] for key in split_keys() if key in train_args})
    else:
        args["dataset_dir"] = held_out.dataset_dir
        args["eval_dataset"] = held_out.name
        args["max_samples"] = max_samples
    args["max_new_tokens"] = max_new_tokens
    args["per_device_eval_batch_size"] = batch_size
    args["output_dir"] = output_dir
    args["overwrite_output_dir"] = True
    args["report_to"] = "none"
    return args


def bounded_int(value: Any, low: int, high: int) -> int | None:
    """`value` as an int within [low, high], or None (not a whole number, or out of bounds)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    if isinstance(value, str):
        value = value.strip()
        if not value.lstrip("-").isdigit() or len(value) > 12:
            return None
        value = int(value)
    if not isinstance(value, int) or not low <= value <= high:
        return None
    return value
