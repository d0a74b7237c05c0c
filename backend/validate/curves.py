"""Two loss curves compared step by step, and a resumed curve checked for continuity. Pure.

A curve is a sequence of (step, loss). `compare_curves(base, other, tolerance)` is the rung-2
question ("do N processes train the same as one?") and the fault drill's ("does the resumed run
continue the uninterrupted one?"): for every step of `base`, the loss of `other` at that step
within `tolerance`, relative to the base's loss (|other - base| <= tolerance * max(|base|,
ABS_FLOOR)); a step `other` lacks, or logs twice, is a defect of its own, whatever the losses.

`continuity(items)` reads a trainer log's records in order (MetricPoint and the AttemptStart
RocBoard writes at a resume, as backend/runs/trainer_log.LiveTrainerLog yields them) and says
whether each attempt continued from its checkpoint's step with no gap, no step logged twice
within an attempt, and no jump: the steps an attempt trained again match the earlier attempt's
within the tolerance.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_TOLERANCE = 0.02  # 2 % of the loss: measured gap of 2 CPU processes vs one: < 1e-6
ABS_FLOOR = 1e-3  # a loss near 0 is compared against this, not against itself
MAX_POINTS = 100_000  # a curve longer than this is refused rather than compared
MAX_LISTED = 20  # steps named in a verdict (missing, duplicate), at most

Curve = Sequence[tuple[int, float]]


class CurveError(ValueError):
    """A curve that cannot be compared (too long, a step that is not an int)."""


@dataclass(frozen=True)
class CurveVerdict:
    """What comparing `other` with `base` found.

    `max_gap`: the largest |other - base| over the steps both have (relative: divided by
    max(|base|, ABS_FLOOR)); `max_gap_step` where; `first_beyond`: the first step whose gap
    exceeds the tolerance (None: none); `missing`: steps of base that other lacks; `extra`:
    steps other has and base has not; `duplicates`: steps logged more than once in other (or
    in base); `compared`: how many steps both have."""

    tolerance: float
    compared: int
    max_gap: float
    max_gap_step: int | None
    first_beyond: int | None
    missing: tuple[int, ...]
    extra: tuple[int, ...]
    duplicates: tuple[int, ...]
    missing_count: int = 0
    duplicate_count: int = 0

    @property
    def ok(self) -> bool:
        return self.compared > 0 and self.first_beyond is None and self.missing_count == 0 and self.duplicate_count == 0


def _checked(curve: Iterable[tuple[int, float]]) -> list[tuple[int, float]]:
    points: list[tuple[int, float]] = []
    for point in curve:
        if len(points) >= MAX_POINTS:
            raise CurveError(f"a curve of more than {MAX_POINTS} points")
        step, loss = point
        if isinstance(step, bool) or not isinstance(step, int):
            raise CurveError(f"step {step!r} is not an integer")
        points.append((step, float(loss)))
    return points


def gap(base: float, other: float) -> float:
    """The relative gap of `other` from `base` (inf when either is not finite)."""
    if not (math.isfinite(base) and math.isfinite(other)):
        return math.inf
    return abs(other - base) / max(abs(base), ABS_FLOOR)


def compare_curves(base: Iterable[tuple[int, float]], other: Iterable[tuple[int, float]], tolerance: float = DEFAULT_TOLERANCE) -> CurveVerdict:
    """`other` against `base`, step by step (see the module's docstring)."""
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance >= 0):
        raise CurveError(f"tolerance {tolerance!r} is not a finite number >= 0")
    base_points, other_points = _checked(base), _checked(other)
    counts = Counter(step for step, _ in other_points) + Counter(step for step, _ in base_points)
    base_steps = Counter(step for step, _ in base_points)
    other_steps = Counter(step for step, _ in other_points)
    duplicates = sorted(step for step in counts if base_steps[step] > 1 or other_steps[step] > 1)
    base_loss = dict(base_points)
    other_loss = dict(other_points)
    missing = sorted(set(base_loss) - set(other_loss))
    extra = sorted(set(other_loss) - set(base_loss))
    max_gap, max_step, first_beyond, compared = 0.0, None, None, 0
    for step in sorted(set(base_loss) & set(other_loss)):
        compared += 1
        value = gap(base_loss[step], other_loss[step])
        if max_step is None or value > max_gap:
            max_gap, max_step = value, step
        if first_beyond is None and value > tolerance:
            first_beyond = step
    return CurveVerdict(
        tolerance=float(tolerance),
        compared=compared,
        max_gap=max_gap,
        max_gap_step=max_step,
        first_beyond=first_beyond,
        missing=tuple(missing[:MAX_LISTED]),
        extra=tuple(extra[:MAX_LISTED]),
        duplicates=tuple(duplicates[:MAX_LISTED]),
        missing_count=len(missing),
        duplicate_count=len(duplicates),
    )


@dataclass(frozen=True)
class Continuity:
    """A resumed log's check: `attempts` (how many, the first included), `resumed_from` (each
    resumed attempt's checkpoint step), `gaps` (a step missing where an attempt went on: the
    step after the one before it), `duplicates` (a step logged twice within one attempt),
    `jump` (the largest relative gap between a step trained again and the same step of the
    attempt before), `jump_step` where, `beyond` (the first such step beyond the tolerance)."""

    attempts: int
    resumed_from: tuple[int, ...]
    gaps: tuple[int, ...]
    duplicates: tuple[int, ...]
    jump: float
    jump_step: int | None
    beyond: int | None
    retrained: int  # steps trained again after a resume, compared with the attempt before

    @property
    def ok(self) -> bool:
        return not self.gaps and not self.duplicates and self.beyond is None


def continuity(items: Iterable[object], tolerance: float = DEFAULT_TOLERANCE) -> Continuity:
    """The records of a trainer log, in order: objects with `step` and `loss` (MetricPoint),
    and objects with `from_step` (AttemptStart). Lines without a loss (the closing line, an
    evaluation's) count as steps but are not compared."""
    attempts: list[dict[int, float | None]] = [{}]
    resumed_from: list[int] = []
    gaps: list[int] = []
    duplicates: list[int] = []
    last_step: int | None = None
    seen = 0
    for item in items:
        seen += 1
        if seen > MAX_POINTS:
            raise CurveError(f"a log of more than {MAX_POINTS} records")
        from_step = getattr(item, "from_step", None)
        if isinstance(from_step, int):
            resumed_from.append(from_step)
            attempts.append({})
            last_step = from_step
            continue
        step, loss = getattr(item, "step", None), getattr(item, "loss", None)
        if not isinstance(step, int):
            continue
        current = attempts[-1]
        if step in current:
            if loss is not None and current[step] is not None:
                duplicates.append(step)
            elif loss is not None:
                current[step] = float(loss)
            continue
        if last_step is not None and step != last_step + 1 and step > last_step:
            gaps.append(last_step + 1)
        elif last_step is None and step != 1:
            gaps.append(1)
        current[step] = None if loss is None else float(loss)
        last_step = max(step, last_step or 0)
    jump, jump_step, beyond, retrained = 0.0, None, None, 0
    for earlier, later in zip(attempts, attempts[1:], strict=False):
        for step in sorted(set(earlier) & set(later)):
            before, after = earlier[step], later[step]
            if before is None or after is None:
                continue
            retrained += 1
            value = gap(before, after)
            if jump_step is None or value > jump:
                jump, jump_step = value, step
            if beyond is None and value > tolerance:
                beyond = step
    return Continuity(
        attempts=len(attempts),
        resumed_from=tuple(resumed_from),
        gaps=tuple(gaps[:MAX_LISTED]),
        duplicates=tuple(duplicates[:MAX_LISTED]),
        jump=jump,
        jump_step=jump_step,
        beyond=beyond,
        retrained=retrained,
    )


__all__ = ["ABS_FLOOR", "DEFAULT_TOLERANCE", "Continuity", "CurveError", "CurveVerdict", "compare_curves", "continuity", "gap"]
