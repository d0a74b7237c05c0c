"""The loss chart's drawn points, kept up to date point by point (backend/runs/logs.py
DrawnCurve, MetricSeries) against the same rule applied from scratch, written here apart:
buckets of `width` consecutive points (the smallest power of two that keeps them at most
`max_buckets`), each showing its first point, its lowest and highest value (NaN skipped), and
the curve's last point always shown."""

from __future__ import annotations

import json
import math
import random

import pytest

from backend.charts import loss_figure, smooth
from backend.runs.logs import CURVES, DrawnCurve, MetricPoint, MetricSeries


def point(step: int, loss: float | None = 1.0, lr: float | None = 1e-4, accuracy: float | None = None, reward: float | None = None) -> MetricPoint:
    return MetricPoint(step=step, total_steps=10**6, loss=loss, lr=lr, epoch=None, percentage=None, elapsed="", remaining="", accuracy=accuracy, reward=reward)


def random_value(rng: random.Random, nan_rate: float = 0.05) -> float:
    roll = rng.random()
    if roll < nan_rate:
        return math.nan
    if roll < nan_rate * 1.2:
        return rng.choice([math.inf, -math.inf])
    if roll < nan_rate * 1.2 + 0.01:
        return rng.choice([0.0, 1.0])  # ties
    return rng.uniform(0, 5)


def random_points(rng: random.Random, start: int, count: int, preference: bool = False) -> list[MetricPoint]:
    out = []
    for step in range(start, start + count):
        out.append(
            point(
                step,
                loss=None if rng.random() < 0.03 else random_value(rng),
                lr=None if rng.random() < 0.1 else rng.uniform(0, 1e-3),
                accuracy=random_value(rng) if preference and rng.random() < 0.8 else None,
                reward=random_value(rng) if preference and rng.random() < 0.5 else None,
            )
        )
    return out


def key(value: float | None) -> object:
    """NaN equal to NaN, for comparing lists."""
    return "nan" if value is not None and math.isnan(value) else value


def reference(points: list[MetricPoint], name: str, max_points: int, width: int | None = None) -> list[tuple]:
    """The drawn (step, value, smoothed) of one curve, from scratch: the rule, written naively."""
    extremes = dict(CURVES)[name]
    having = [p for p in points if getattr(p, name) is not None]
    values = [float(getattr(p, name)) for p in having]
    smoothed = smooth(values) if name == "loss" else [None] * len(values)
    n = len(values)
    max_buckets = (max_points - 1) // (3 if extremes else 1)
    if width is None:
        width = 1
        while math.ceil(n / width) > max_buckets:
            width *= 2
    chosen = {n - 1} if n else set()
    for start in range(0, n, width):
        chosen.add(start)
        ranked = [(values[i], i) for i in range(start, min(n, start + width)) if not math.isnan(values[i])]
        if extremes and ranked:
            chosen.add(min(ranked)[1])
            chosen.add(max(ranked)[1])
    return [(having[i].step, key(values[i]), key(smoothed[i])) for i in sorted(chosen)]


def drawn(series_or_curve: DrawnCurve) -> list[tuple]:
    return [(e[1], key(e[2]), key(e[3])) for e in series_or_curve.drawn()]


@pytest.mark.parametrize("seed", range(6))
def test_the_incremental_view_equals_the_rule_from_scratch_across_many_appends(seed: int) -> None:
    rng = random.Random(seed)
    display = rng.choice([7, 31, 60, 600])  # small bounds: many merges
    series = MetricSeries(max_points=10**6, display_points=display)
    step = 1
    for _ in range(120):
        chunk = random_points(rng, step, rng.choice([1, 1, 2, 10, 57]), preference=seed % 2 == 1)
        step += len(chunk)
        series.extend(chunk)
        for name, curve in series.curves.items():
            assert drawn(curve) == reference(series.points, name, display), name
            assert len(curve.drawn()) <= display
    # From scratch in one go (what a list of points gets) is the same view.
    assert loss_figure(series, max_points=display) == loss_figure(list(series.points), max_points=display)


def test_the_smoothed_loss_equals_smooth_of_the_whole_series() -> None:
    rng = random.Random(7)
    series = MetricSeries(max_points=10**6)
    for start in range(1, 5001, 50):
        series.extend(random_points(rng, start, 50))
    losses = [float(p.loss) for p in series.points if p.loss is not None]
    assert [key(v) for v in series.smoothed() if v is not None] == [key(v) for v in smooth(losses)]
    # And what the chart draws of it: the smoothed value of each drawn point.
    expected = dict(zip([p.step for p in series.points if p.loss is not None], smooth(losses), strict=True))
    assert all(key(e[3]) == key(expected[e[1]]) for e in series.chart()["loss"])


def test_the_bound_holds_at_100k_points_with_spikes_and_the_last_point_kept() -> None:
    rng = random.Random(3)
    series = MetricSeries()
    spike_at, dip_at = rng.randrange(1, 100_000), rng.randrange(1, 100_000)
    for start in range(1, 100_001, 1000):
        chunk = []
        for step in range(start, start + 1000):
            loss = 100.0 if step == spike_at else -100.0 if step == dip_at else 2.0 + rng.random()
            chunk.append(point(step, loss=loss, lr=1e-4 * (1 - step / 10**5), accuracy=rng.random()))
        series.extend(chunk)
    chart = series.chart()
    for name in ("loss", "lr", "accuracy"):
        assert 0 < len(chart[name]) <= 600, name
        assert chart[name][-1][1] == 100_000  # the last point, always
    steps = {e[1] for e in chart["loss"]}
    assert {spike_at, dip_at} <= steps  # a spike never disappears
    figure = loss_figure(series)
    assert all(len(trace["x"]) <= 600 for trace in figure["data"])
    assert max(figure["data"][0]["y"]) == 100.0 and min(figure["data"][0]["y"]) == -100.0
    assert len(series.points) <= 20_000  # the series itself stays thinned, the view sees every point


def test_nan_and_inf_are_gaps_and_smoothing_skips_them() -> None:
    series = MetricSeries()
    series.extend([point(1, 1.0), point(2, math.nan), point(3, math.inf), point(4, 2.0)])
    figure = loss_figure(series)
    assert figure["data"][0]["y"] == [1.0, None, None, 2.0]
    assert figure["data"][1]["y"] == [None if not math.isfinite(v) else v for v in smooth([1.0, math.nan, math.inf, 2.0])]
    json.dumps(figure, allow_nan=False)  # valid JSON


@pytest.mark.parametrize("seed", range(4))
def test_a_resume_going_back_keeps_the_view_right(seed: int) -> None:
    rng = random.Random(100 + seed)
    display = rng.choice([10, 31, 600])
    series = MetricSeries(max_points=10**6, display_points=display)
    step = 1
    for _ in range(60):
        if step > 5 and rng.random() < 0.2:
            step = rng.randrange(1, step)  # a resume from an earlier checkpoint
        chunk = random_points(rng, step, rng.choice([1, 3, 40]), preference=True)
        step += len(chunk)
        series.extend(chunk)
        if rng.random() < 0.1:  # LLaMA-Factory's closing line: the last step again, no loss
            series.extend([point(step - 1, loss=None, lr=None)])
        assert [p.step for p in series.points] == sorted({p.step for p in series.points})
        for name, curve in series.curves.items():
            # Going back keeps the width it had: the rule at that width, on the points kept.
            assert drawn(curve) == reference(series.points, name, display, width=curve.width), name
            assert len(curve.drawn()) <= display
        losses = [float(p.loss) for p in series.points if p.loss is not None]
        assert [key(v) for v in series.smoothed() if v is not None] == [key(v) for v in smooth(losses)]


def test_a_resume_into_the_recent_points_of_a_thinned_series() -> None:
    series = MetricSeries(max_points=1_000, recent=100)
    series.extend([point(s, float(s % 7)) for s in range(1, 5_001)])
    series.extend([point(s, 0.5) for s in range(4_950, 5_100)])
    assert series.points[-1].step == 5_099 and len(series.points) <= 1_000
    chart = series.chart()
    assert chart["loss"][-1][1:3] == (5_099, 0.5)
    assert [e[1] for e in chart["loss"]] == sorted({e[1] for e in chart["loss"]})
    assert len(chart["loss"]) <= 600
    # The smoothing goes on over every point that arrived, the thinned ones included.
    arrived = [float(s % 7) for s in range(1, 4_950)] + [0.5] * 150
    expected = dict(zip(range(1, 5_100), smooth(arrived), strict=True))
    assert all(v == expected[p.step] for p, v in zip(series.points, series.smoothed(), strict=True))
    assert all(e[3] == expected[e[1]] for e in chart["loss"])


def apply(client: dict, answer: dict) -> None:
    """What a browser does with chart_since's answer."""
    for name, sent in answer["curves"].items():
        held = client.setdefault(name, {"x": [], "y": [], "smoothed": []})
        if sent["reset"]:
            kept = 0
        else:
            kept = next((i for i, x in enumerate(held["x"]) if x >= sent["x"][0]), len(held["x"]))
        for column in ("x", "y", "smoothed"):
            held[column] = held[column][:kept] + sent.get(column, [])


@pytest.mark.parametrize("seed", range(4))
def test_chart_since_gives_what_a_browser_needs_to_stay_equal(seed: int) -> None:
    rng = random.Random(200 + seed)
    series = MetricSeries(max_points=10**6, display_points=rng.choice([10, 60, 600]))
    client: dict = {}
    cursor = None
    step, resets, partial = 1, 0, 0
    for _ in range(150):
        if step > 5 and rng.random() < 0.05:
            step = rng.randrange(1, step)
        chunk = random_points(rng, step, rng.choice([1, 2, 30]), preference=True)
        step += len(chunk)
        series.extend(chunk)
        answer = series.chart_since(cursor)
        json.dumps(answer, allow_nan=False)
        resets += sum(c["reset"] for c in answer["curves"].values())
        partial += sum(not c["reset"] and len(c["x"]) < len(series.curves[n].drawn()) for n, c in answer["curves"].items())
        apply(client, answer)
        cursor = answer["cursor"]
        for name, entries in series.chart().items():
            if not entries:
                continue
            assert client[name]["x"] == [e[1] for e in entries], name
            assert client[name]["y"] == [e[2] if math.isfinite(e[2]) else None for e in entries], name
            if name == "loss":
                assert client[name]["smoothed"] == [e[3] if math.isfinite(e[3]) else None for e in entries]
    assert series.chart_since(cursor)["curves"] == {}  # nothing new: nothing sent
    assert partial > resets  # most answers send the end only
    # Another series' cursor (a new monitor, a restarted app) gets everything.
    other = MetricSeries()
    other.extend([point(1), point(2)])
    assert all(c["reset"] for c in other.chart_since(cursor)["curves"].values())


def test_a_list_of_points_still_draws_as_before() -> None:
    points = [point(s, loss=float(s), lr=1e-4) for s in (1, 2, 3)]
    figure = loss_figure(points)
    assert [t["x"] for t in figure["data"]] == [[1, 2, 3]] * 3
    assert figure["data"][0]["y"] == [1.0, 2.0, 3.0]
    assert figure["data"][1]["y"] == smooth([1.0, 2.0, 3.0])
    assert loss_figure([])["data"][0]["x"] == []
