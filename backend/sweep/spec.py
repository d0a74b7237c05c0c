"""A sweep's spec: which fields of the run form vary, over which values, and the runs it makes.

A field is defined only in backend/config/schema.py: a sweep names fields by their form name
and each value is read by the field's own parser and bounds (`parse_form` on the base form
with that one value changed), so a value the form refuses is refused here with the form's
own words, naming the field and the value. The grid is the cartesian product of the fields'
values (times the seeds); everything is bounded, and a sweep that is too large is refused
from its counts alone, before any value is parsed or anything is queued.

Pure: no files, no processes (backend/sweep/desk.py queues the runs).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backend.config import field_noun, form_value, parse_form, schema, shown
from backend.findings import Finding
from backend.i18n import Message

MAX_FIELDS = 3  # fields varied at once (learning rate x LoRA rank x cutoff)
MAX_VALUES = 64  # values of one field
MAX_SEEDS = 64
MAX_RUNS = 64  # runs of one sweep (a node of 8 GPUs, 8 deep)
RAW_VALUE_MAX_CHARS = 64  # one value as typed
# The kinds of field a sweep may vary: numbers and choices (text, datasets, GPU lists and
# Other keys are not values on an axis).
SWEEPABLE_KINDS = frozenset({"int", "float", "optional_int", "choice", "quantization"})
NOT_SWEPT = frozenset({"preset", "run_name"})
# Short tags for the run names ("lr2e-4-r16"); any other field is tagged by its form name.
TAGS = {
    "learning_rate": "lr",
    "lora_rank": "r",
    "lora_alpha": "alpha",
    "lora_dropout": "drop",
    "cutoff_len": "cut",
    "batch_size": "bs",
    "grad_accum": "ga",
    "num_train_epochs": "ep",
    "max_steps": "steps",
    "warmup_ratio": "wu",
    "warmup_steps": "wus",
    "seed": "seed",
    "lr_scheduler_type": "sched",
    "pref_beta": "beta",
}
NAME_MAX_CHARS = 96
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")


class SweepRefused(ValueError):
    """A sweep that cannot be made, and why: `message` is a Message (en as its string)."""

    def __init__(self, message: Message):
        super().__init__(str(message))
        self.message = message


@dataclass(frozen=True)
class Axis:
    """One varied field and its values as typed (strings or numbers)."""

    field: str
    values: tuple[Any, ...]


@dataclass(frozen=True)
class SweepSpec:
    axes: tuple[Axis, ...] = ()
    seeds: int = 0  # 0: no seed axis; N: the base seed, +1, ... +N-1

    def run_count(self) -> int:
        return math.prod(len(axis.values) for axis in self.axes) * max(1, self.seeds)


@dataclass(frozen=True)
class SweepRun:
    """One run of the sweep: its name, the values that make it (form name -> form value, in
    the spec's order) and the whole form it starts with."""

    name: str
    values: tuple[tuple[str, Any], ...]
    form: dict[str, Any]


def parse_vary(text: str) -> Axis:
    """`learning_rate=1e-4,2e-4,5e-4` as an Axis (SweepRefused for one without `=` or values)."""
    name, sep, values = str(text).partition("=")
    name = name.strip()
    if not sep or not name:
        raise SweepRefused(Message("sweep.bad-vary", text=shown(text)))
    raw = [value.strip() for value in values.split(",")]
    if len(raw) > MAX_VALUES:
        raise SweepRefused(Message("sweep.too-many-values", field=_noun(name), count=len(raw), limit=MAX_VALUES))
    if not any(raw):
        raise SweepRefused(Message("sweep.no-values", field=_noun(name)))
    return Axis(name, tuple(value for value in raw if value))


def _noun(name: str) -> Any:
    return field_noun(name) if name in {f.name for f in schema.run_fields()} else shown(name)


def check_counts(spec: SweepSpec) -> None:
    """The bounds that need no value parsed: fields, values per field, seeds, runs."""
    if not spec.axes and not spec.seeds:
        raise SweepRefused(Message("sweep.nothing-varies"))
    if len(spec.axes) > MAX_FIELDS:
        raise SweepRefused(Message("sweep.too-many-fields", count=len(spec.axes), limit=MAX_FIELDS))
    if not 0 <= spec.seeds <= MAX_SEEDS:
        raise SweepRefused(Message("sweep.seeds-range", seeds=shown(spec.seeds), limit=MAX_SEEDS))
    seen: set[str] = set()
    for axis in spec.axes:
        if axis.field in seen:
            raise SweepRefused(Message("sweep.field-twice", field=_noun(axis.field)))
        seen.add(axis.field)
        if not axis.values:
            raise SweepRefused(Message("sweep.no-values", field=_noun(axis.field)))
        if len(axis.values) > MAX_VALUES:
            raise SweepRefused(Message("sweep.too-many-values", field=_noun(axis.field), count=len(axis.values), limit=MAX_VALUES))
    if spec.seeds and "seed" in seen:
        raise SweepRefused(Message("sweep.seed-twice"))
    count = spec.run_count()
    if count > MAX_RUNS:
        raise SweepRefused(Message("sweep.too-many-runs", count=count, limit=MAX_RUNS))


def sweepable_fields() -> tuple[str, ...]:
    return tuple(f.name for f in schema.run_fields() if f.kind in SWEEPABLE_KINDS and f.name not in NOT_SWEPT)


def typed_values(axis: Axis, base_form: Mapping[str, Any], distinct: bool = True) -> tuple[Any, ...]:
    """The axis's values as form values, each read by its field's own parser and bounds
    (SweepRefused for a value given twice, unless not `distinct`)."""
    known = {f.name: f for f in schema.run_fields()}
    form_field = known.get(axis.field)
    if form_field is None or axis.field not in sweepable_fields():
        raise SweepRefused(Message("sweep.unknown-field", field=shown(axis.field), fields=", ".join(sweepable_fields())))
    typed: list[Any] = []
    for raw in axis.values:
        if isinstance(raw, str) and len(raw) > RAW_VALUE_MAX_CHARS:
            raise SweepRefused(Message("sweep.bad-value", field=field_noun(axis.field), value=shown(raw), problem=Message("sweep.value-too-long", limit=RAW_VALUE_MAX_CHARS)))
        config, findings = parse_form({**base_form, axis.field: raw})
        own = [finding for finding in findings if finding.key == axis.field]
        if own:
            raise SweepRefused(Message("sweep.bad-value", field=field_noun(axis.field), value=shown(raw), problem=_problem(own[0])))
        value = form_value(form_field, config.value(axis.field))
        if distinct and value in typed:
            raise SweepRefused(Message("sweep.duplicate-value", field=field_noun(axis.field), value=shown(raw)))
        typed.append(value)
    return tuple(typed)


def _problem(finding: Finding) -> Any:
    """The finding's problem as a message of its own (rendered in the reader's language)."""
    if finding.params is None:
        return finding.problem
    return Message(f"check.{finding.message or finding.rule}.problem", **{"key": finding.key, **finding.params})


def value_tag(value: Any) -> str:
    """A value as a run name shows it: 2e-4, 16, 0.05, cosine."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-2 or abs(value) >= 1e5):
            mantissa, _, exponent = f"{value:.2e}".partition("e")
            mantissa = mantissa.rstrip("0").rstrip(".")
            return f"{mantissa}e{int(exponent)}"
        return f"{value:.4g}"
    return str(value)


def sanitize(name: str) -> str:
    """A run name of safe characters only (letters, digits, . _ -), bounded."""
    cleaned = _NAME_BAD.sub("-", name).strip("-.") or "sweep"
    return cleaned[:NAME_MAX_CHARS].rstrip("-.")


def run_name(prefix: str, values: Sequence[tuple[str, Any]]) -> str:
    tags = "-".join(f"{TAGS.get(name, name)}{value_tag(value)}" for name, value in values)
    return sanitize(f"{prefix}-{tags}" if prefix else tags)


def expand(spec: SweepSpec, base_form: Mapping[str, Any], prefix: str = "", taken: Sequence[str] = ()) -> list[SweepRun]:
    """The runs of `spec` over `base_form`: the grid's every point (the last field varies
    fastest), each named by its values and unique (among themselves and `taken`).
    SweepRefused, before anything is made, for a spec out of bounds or a value refused."""
    check_counts(spec)
    axes = [(axis.field, typed_values(axis, base_form)) for axis in spec.axes]
    if spec.seeds:
        axes.append(_seed_axis(base_form, spec.seeds))
    return _grid(axes, base_form, prefix, taken)


def _seed_axis(base_form: Mapping[str, Any], seeds: int) -> tuple[str, tuple[int, ...]]:
    config, _ = parse_form(base_form)
    base_seed = int(config.value("seed"))
    return ("seed", tuple((base_seed + i) % (schema.SEED_MAX + 1) for i in range(seeds)))


def _grid(axes: Sequence[tuple[str, tuple[Any, ...]]], base_form: Mapping[str, Any], prefix: str, taken: Sequence[str], new: Mapping[str, tuple[Any, ...]] | None = None) -> list[SweepRun]:
    """The runs of the grid of `axes` (typed values), each named by its values and unique
    among themselves and `taken`; with `new`, only the points holding one of its values."""
    names = {name: None for name in taken}
    runs: list[SweepRun] = []
    for point in itertools.product(*(values for _, values in axes)):
        values = tuple(zip((name for name, _ in axes), point, strict=True))
        if new is not None and not any(value in new.get(field, ()) for field, value in values):
            continue
        name = base = run_name(prefix, values)
        n = 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names[name] = None
        runs.append(SweepRun(name, values, {**base_form, **dict(values), "run_name": name}))
    return runs


def typed_axes(axes: Sequence[tuple[str, Sequence[Any]]], base_form: Mapping[str, Any]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """A record's axes with their values as form values (a record keeps them as they were
    given: "4" from a box, 4 from an earlier addition)."""
    return tuple((field, tuple(dict.fromkeys(typed_values(Axis(field, tuple(values)), base_form, distinct=False)))) for field, values in axes)


def expand_added(
    axes_now: Sequence[tuple[str, tuple[Any, ...]]], seeds: int, added: Sequence[Axis], base_form: Mapping[str, Any], prefix: str = "", taken: Sequence[str] = (), runs_now: int = 0
) -> tuple[list[SweepRun], tuple[tuple[str, tuple[Any, ...]], ...]]:
    """Values added to fields a sweep varies (`axes_now`, its values as typed; `seeds` per
    point): the runs that makes (every point of the grid grown by the added values that holds
    one of them, names unique beside `taken`) and the sweep's axes after. SweepRefused, before
    anything is made, for a field the sweep does not vary, a value it has already, or a sweep
    that would grow past MAX_RUNS (`runs_now`: the runs it has)."""
    varied = dict(typed_axes(axes_now, base_form))
    if not varied:
        raise SweepRefused(Message("sweep.add-no-fields"))
    if not added:
        raise SweepRefused(Message("sweep.nothing-varies"))
    check_counts(SweepSpec(tuple(added), 0))
    for axis in added:
        if axis.field not in varied:
            raise SweepRefused(Message("sweep.add-field-not-varied", field=_noun(axis.field), fields=", ".join(varied)))
    grown = dict(varied)
    for axis in added:
        if len(varied[axis.field]) + len(axis.values) > MAX_VALUES:
            raise SweepRefused(Message("sweep.too-many-values", field=_noun(axis.field), count=len(varied[axis.field]) + len(axis.values), limit=MAX_VALUES))
        typed = typed_values(axis, base_form)
        for raw, value in zip(axis.values, typed, strict=True):
            if value in varied[axis.field]:
                raise SweepRefused(Message("sweep.value-already-there", field=field_noun(axis.field), value=shown(raw)))
        grown[axis.field] = (*varied[axis.field], *typed)
    count = math.prod(len(values) for values in grown.values()) * max(1, seeds)
    new_count = count - math.prod(len(values) for values in varied.values()) * max(1, seeds)
    if count > MAX_RUNS or runs_now + new_count > MAX_RUNS:
        raise SweepRefused(Message("sweep.too-many-runs", count=max(count, runs_now + new_count), limit=MAX_RUNS))
    axes = list(grown.items())
    if seeds:
        axes.append(_seed_axis(base_form, seeds))
    fresh = {field: tuple(value for value in values if value not in varied[field]) for field, values in grown.items()}
    return _grid(axes, base_form, prefix, taken, fresh), tuple(grown.items())


__all__ = [
    "MAX_FIELDS",
    "MAX_RUNS",
    "Axis",
    "SweepRefused",
    "SweepRun",
    "SweepSpec",
    "check_counts",
    "expand",
    "expand_added",
    "parse_vary",
    "run_name",
    "sanitize",
    "sweepable_fields",
    "typed_axes",
    "typed_values",
    "value_tag",
]
