"""backend/validate/curves.py: two loss curves compared step by step, a resumed log's continuity."""

from __future__ import annotations

import math

import pytest

from backend.runs.logs import AttemptStart, MetricPoint
from backend.validate.curves import ABS_FLOOR, CurveError, compare_curves, continuity, gap

BASE = [(1, 6.71), (2, 6.07), (3, 6.13), (4, 5.34), (5, 4.97)]


def point(step: int, loss: float | None) -> MetricPoint:
    return MetricPoint(step=step, total_steps=10, loss=loss, lr=None, epoch=None, percentage=None, elapsed="", remaining="")


def test_the_same_curve_passes_with_zero_gap():
    verdict = compare_curves(BASE, list(BASE), 0.02)
    assert verdict.ok and verdict.compared == 5 and verdict.max_gap == 0.0 and verdict.first_beyond is None


def test_a_gap_within_tolerance_passes_and_is_measured_relative_to_the_base():
    other = [(step, loss * 1.01) for step, loss in BASE]
    verdict = compare_curves(BASE, other, 0.02)
    assert verdict.ok
    assert verdict.max_gap == pytest.approx(0.01, rel=1e-6)


def test_the_first_step_beyond_tolerance_is_named():
    other = [(1, 6.71), (2, 6.07), (3, 6.5), (4, 5.34), (5, 6.0)]
    verdict = compare_curves(BASE, other, 0.02)
    assert not verdict.ok
    assert verdict.first_beyond == 3
    assert verdict.max_gap_step == 5 and verdict.max_gap == pytest.approx((6.0 - 4.97) / 4.97)


def test_missing_and_duplicate_steps_fail_whatever_the_losses():
    missing = compare_curves(BASE, [p for p in BASE if p[0] != 4], 0.5)
    assert not missing.ok and missing.missing == (4,) and missing.missing_count == 1
    doubled = compare_curves(BASE, [*BASE, (3, 6.13)], 0.5)
    assert not doubled.ok and doubled.duplicates == (3,)
    extra = compare_curves(BASE, [*BASE, (6, 4.5)], 0.02)
    assert extra.ok and extra.extra == (6,)  # a longer curve: only base's steps are asked for


def test_nothing_in_common_is_not_a_pass():
    assert not compare_curves(BASE, [], 0.02).ok
    assert not compare_curves([], [], 0.02).ok


def test_a_loss_near_zero_and_non_finite_losses():
    assert gap(0.0, 0.0005) == pytest.approx(0.0005 / ABS_FLOOR)
    assert gap(1.0, math.nan) == math.inf and gap(math.inf, 1.0) == math.inf
    assert not compare_curves([(1, 1.0)], [(1, math.nan)], 0.5).ok


def test_bad_input_is_refused():
    with pytest.raises(CurveError):
        compare_curves([(1.5, 1.0)], BASE)  # type: ignore[list-item]  # a step that is not an int, on purpose
    with pytest.raises(CurveError):
        compare_curves([(True, 1.0)], BASE)
    with pytest.raises(CurveError):
        compare_curves(BASE, BASE, -1)
    with pytest.raises(CurveError):
        compare_curves(((i, 1.0) for i in range(200_000)), BASE)


def test_a_resume_that_continues_is_continuous():
    first = [point(s, 5.0 - s * 0.1) for s in range(1, 11)]  # killed after step 10
    resumed = [point(s, 5.0 - s * 0.1) for s in range(7, 13)] + [point(12, None)]  # from checkpoint 6
    check = continuity([*first, AttemptStart(2, 6), *resumed], 0.02)
    assert check.ok
    assert check.attempts == 2 and check.resumed_from == (6,)
    assert check.retrained == 4 and check.jump == 0.0  # steps 7-10 trained twice, the same


def test_a_jump_a_gap_and_a_duplicate_are_each_found():
    first = [point(s, 5.0) for s in range(1, 9)]
    jumped = continuity([*first, AttemptStart(2, 6), point(7, 5.0), point(8, 6.0), point(9, 5.0)], 0.02)
    assert not jumped.ok and jumped.beyond == 8 and jumped.jump_step == 8
    gapped = continuity([*first, AttemptStart(2, 6), point(8, 5.0), point(9, 5.0)], 0.02)
    assert not gapped.ok and gapped.gaps == (7,)
    doubled = continuity([point(1, 5.0), point(2, 5.0), point(2, 4.0)], 0.02)
    assert not doubled.ok and doubled.duplicates == (2,)
    late_start = continuity([point(3, 5.0)], 0.02)
    assert late_start.gaps == (1,)


def test_the_closing_line_without_a_loss_is_no_duplicate():
    check = continuity([point(1, 5.0), point(2, 4.0), point(2, None)], 0.02)
    assert check.ok and check.attempts == 1 and check.resumed_from == ()
