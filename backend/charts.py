"""Plotly figures as plain JSON-able dicts, built from a run's points and readings.

No plotly import on the hot path: a figure is a small dict the browser's plotly.js draws.
Long histories are downsampled for display only (the data on disk stays whole), with the
last point always kept and a bucket's extremes kept so a spike never disappears.

The loss chart's drawn points are kept up to date by the MetricSeries as points arrive
(backend/runs/logs.py DrawnCurve): given the series, `loss_figure` costs O(drawn points),
flat however long the run; given a list of points, it computes the same view from scratch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from backend.i18n import translate
from backend.runs.logs import DISPLAY_POINTS, SMOOTHING, Entry, MetricPoint, MetricSeries, drawn_curves, ema

MAX_DISPLAY_POINTS = DISPLAY_POINTS

LIGHT_LAYOUT: dict[str, Any] = {
    "template": "plotly_white",
    "margin": {"l": 60, "r": 70, "t": 60, "b": 50},
    "height": 340,
    "legend": {"orientation": "h", "x": 0, "y": 1.12, "xanchor": "left"},
}


def downsample_indices(n: int, max_points: int = MAX_DISPLAY_POINTS, values: Sequence[float | None] | None = None) -> list[int]:
    """Indices of at most ~max_points samples out of n: per bucket, its first point and
    (when values are given) its min and max; the last index is always kept."""
    if n <= max_points:
        return list(range(n))
    per_bucket = 3 if values is not None else 1
    buckets = max(1, max_points // per_bucket)
    size = n / buckets
    chosen: set[int] = {n - 1}
    for b in range(buckets):
        start, end = int(b * size), min(n, int((b + 1) * size))
        if start >= end:
            continue
        chosen.add(start)
        if values is not None:
            window = [(v, i) for i, v in enumerate(values[start:end], start) if v is not None and not math.isnan(v)]
            if window:
                chosen.add(min(window)[1])
                chosen.add(max(window)[1])
    return sorted(chosen)


def smooth(values: Sequence[float], weight: float = SMOOTHING) -> list[float]:
    """Debiased exponential moving average, as TensorBoard draws it; NaN and inf are passed
    through and skipped (one implementation: backend.runs.logs.ema)."""
    return ema(list(values), weight)


def _json_number(value: float | None) -> float | None:
    """NaN and inf are not JSON: plotly gets a gap (None) instead."""
    return value if value is not None and math.isfinite(value) else None


# The default (English) trace and axis names and titles come from the catalogue, like every
# other word; the page passes its own language's (backend/view.py loss_chart_names).
LOSS_NAMES = {
    "loss": translate("chart.loss_series"),
    "smoothed": translate("chart.loss_smoothed"),
    "learning_rate": translate("chart.learning_rate"),
    "step": translate("chart.step"),
    "accuracy": translate("chart.reward_accuracy"),
    "reward": translate("chart.reward"),
    "eval_loss": translate("chart.eval_loss"),
}
# The preference stages' extra curves (MetricPoint attribute, colour, axis): drawn only when
# the run logs them. Accuracy is a fraction: its own axis, 0..1, on the left over the loss's.
_EXTRA_TRACES: tuple[tuple[str, str, str], ...] = (
    ("accuracy", "rgb(31,119,180)", "y3"),
    ("reward", "rgb(44,160,44)", "y4"),
)
MEMORY_NAMES = {"used": translate("chart.used"), "total": translate("chart.total"), "seconds": translate("chart.seconds"), "gib": translate("chart.gib")}


def loss_curves(points: Sequence[MetricPoint] | MetricSeries | dict[str, list[Entry]], max_points: int = MAX_DISPLAY_POINTS) -> dict[str, list[Entry]]:
    """Each curve's drawn entries (index, step, value, smoothed): kept up to date by a
    MetricSeries (O(drawn points)), a MetricSeries.chart() copy as is, or computed from a
    list of points (O(points))."""
    if isinstance(points, dict):
        return points
    if isinstance(points, MetricSeries):
        if points.display_points == max_points and points.smoothing == SMOOTHING:
            return points.chart()
        points = points.points
    return {name: curve.drawn() for name, curve in drawn_curves(points, max_points).items()}


def attempt_marks(marks: Sequence[tuple[float, str]]) -> dict[str, list[dict]]:
    """Layout shapes and annotations for a dotted vertical line at each x of `marks`, named
    by its words (where a resumed attempt began: "attempt 2")."""
    shapes, annotations = [], []
    for x, text in marks:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1, "line": {"color": "rgba(80,80,80,0.7)", "width": 1, "dash": "dot"}})
        annotations.append({"x": x, "xref": "x", "y": 1, "yref": "paper", "yanchor": "bottom", "xanchor": "left", "text": text, "showarrow": False, "font": {"size": 11, "color": "rgb(80,80,80)"}})
    return {"shapes": shapes, "annotations": annotations} if marks else {}


def loss_figure(
    points: Sequence[MetricPoint] | MetricSeries | dict[str, list[Entry]],
    title: str = translate("chart.loss"),
    max_points: int = MAX_DISPLAY_POINTS,
    names: dict[str, str] | None = None,
    marks: Sequence[tuple[float, str]] = (),
) -> dict:
    """Raw and smoothed loss per step, with the learning rate on a second axis and the eval loss
    (when the run evaluates) as markers on the loss's axis; a dpo run's
    reward accuracy (and a ppo run's reward) on axes of their own when the run logs them.
    `points`: the run's MetricSeries (a redraw then costs O(drawn points)), a copy of its
    `chart()` (taken under the lock its owner extends it under), or a list of points.
    `names` gives the trace and axis names in the page's language; `marks` the steps where a
    resumed attempt began, with their words (a dotted line each)."""
    names = {**LOSS_NAMES, **(names or {})}
    curves = loss_curves(points, max_points)
    loss, lr = curves["loss"], curves["lr"]
    loss_x = [e[1] for e in loss]
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers" if len(loss) <= 60 else "lines",
            "name": names["loss"],
            "x": loss_x,
            "y": [_json_number(e[2]) for e in loss],
            "line": {"color": "rgba(237,28,36,0.35)"},
            "marker": {"size": 4},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": names["smoothed"],
            "x": list(loss_x),
            "y": [_json_number(e[3]) for e in loss],
            "line": {"color": "rgb(237,28,36)", "width": 2},
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": names["learning_rate"],
            "x": [e[1] for e in lr],
            "y": [_json_number(e[2]) for e in lr],
            "yaxis": "y2",
            "line": {"color": "rgba(80,80,80,0.6)", "dash": "dot"},
        },
    ]
    evaluated = curves.get("eval_loss") or []
    if evaluated:
        # The loss on the held-out data, on the loss's axis: a point per evaluation, as markers
        # joined by a line (never smoothed: there are few, each the mean over the whole eval set).
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": names["eval_loss"],
                "x": [e[1] for e in evaluated],
                "y": [_json_number(e[2]) for e in evaluated],
                "line": {"color": "rgb(255,127,14)", "width": 1.5, "dash": "dash"},
                "marker": {"size": 8, "symbol": "diamond"},
            }
        )
    layout = {
        **LIGHT_LAYOUT,
        "title": {"text": title},
        "xaxis": {"title": {"text": names["step"]}},
        "yaxis": {"title": {"text": names["loss"]}},
        "yaxis2": {"title": {"text": names["learning_rate"]}, "overlaying": "y", "side": "right", "showgrid": False, "exponentformat": "e", "tickformat": ".0e", "rangemode": "tozero"},
        **attempt_marks(marks),
    }
    extra_axes = 0
    for attribute, color, axis in _EXTRA_TRACES:
        extra = curves[attribute]
        if not extra:
            continue
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers" if len(extra) <= 60 else "lines",
                "name": names[attribute],
                "x": [e[1] for e in extra],
                "y": [_json_number(e[2]) for e in extra],
                "yaxis": axis,
                "line": {"color": color, "width": 1.5},
                "marker": {"size": 4},
            }
        )
        # Each extra axis sits on the right, beyond the learning rate's, its ticks in its colour.
        extra_axes += 1
        layout[f"yaxis{axis[1:]}"] = {
            "title": {"text": names[attribute], "font": {"color": color}},
            "tickfont": {"color": color},
            "overlaying": "y",
            "side": "right",
            "anchor": "free",
            "position": 1.0,
            "autoshift": True,
            "showgrid": False,
            **({"range": [0, 1.05]} if attribute == "accuracy" else {}),
        }
    if extra_axes:
        # Room on the right for the extra axes' ticks and titles.
        layout["margin"] = {**LIGHT_LAYOUT["margin"], "r": 70 + 60 * extra_axes}
    return {"data": data, "layout": layout}


def _with_gaps(x: list[float], y: list[float | None], breaks: Sequence[float]) -> tuple[list[float], list[float | None]]:
    """`x`, `y` with a None point (plotly breaks the line there) at each break that falls
    between two points: no line is drawn across a time nothing was measured."""
    if not breaks or not x:
        return x, y
    pending = sorted(b for b in breaks if b > x[0])
    gapped_x: list[float] = []
    gapped_y: list[float | None] = []
    next_break = 0
    for xi, yi in zip(x, y, strict=True):
        if next_break < len(pending) and pending[next_break] <= xi:
            gapped_x.append(pending[next_break])
            gapped_y.append(None)
            while next_break < len(pending) and pending[next_break] <= xi:
                next_break += 1
        gapped_x.append(xi)
        gapped_y.append(yi)
    return gapped_x, gapped_y


def memory_figure(
    series: Sequence[MemorySeries],
    title: str,
    max_points: int = MAX_DISPLAY_POINTS,
    names: dict[str, str] | None = None,
    marks: Sequence[tuple[float, str]] = (),
) -> dict:
    """One line per GPU (used GiB) and a dashed capacity line per GPU. A line breaks where a
    series had no reading for a while (MemorySeries.breaks) and at each of `marks` (where a
    resumed attempt began, drawn as a dotted line with its words): no process, no line."""
    names = {**MEMORY_NAMES, **(names or {})}
    data: list[dict[str, Any]] = []
    mark_x = [x for x, _ in marks]
    for s in series:
        keep = downsample_indices(len(s.times), max_points, s.used_gib)
        x = [s.times[i] for i in keep]
        gapped_x, gapped_y = _with_gaps(x, [_json_number(s.used_gib[i]) for i in keep], [*s.breaks, *mark_x])
        data.append({"type": "scatter", "mode": "lines", "name": f"{s.label} {names['used']}", "x": gapped_x, "y": gapped_y})
        totals = [t for t in s.total_gib if t is not None and math.isfinite(t)]
        # A GPU's capacity is the line its usage must stay under; the machine's RAM is
        # not a limit of the training process worth drawing at that scale.
        if totals and x and s.source != "process":
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{s.label} {names['total']}",
                    "x": [x[0], x[-1]],
                    "y": [totals[-1], totals[-1]],
                    "line": {"dash": "dash", "width": 1},
                }
            )
    layout = {
        **LIGHT_LAYOUT,
        "title": {"text": title},
        "xaxis": {"title": {"text": names["seconds"]}},
        "yaxis": {"title": {"text": names["gib"]}, "rangemode": "tozero"},
        **attempt_marks(marks),
    }
    return {"data": data, "layout": layout}


MAX_BREAKS = 1_000  # breaks a series keeps (the newest): one per reading at worst


class MemorySeries:
    """The readings of one GPU (or of the training process) as columns for charting."""

    def __init__(self, gpu: int, label: str):
        self.gpu = gpu
        self.label = label
        self.times: list[float] = []
        self.used_gib: list[float | None] = []
        self.total_gib: list[float | None] = []
        self.util_pct: float | None = None
        self.temp_c: float | None = None
        self.power_w: float | None = None
        self.source = ""
        # Times (x) where the series starts again after no reading for a while: a gap there.
        self.breaks: list[float] = []

    def add(self, at: float, used_bytes: int | None, total_bytes: int | None, util: float | None, temp: float | None, power: float | None, source: str) -> None:
        if len(self.breaks) > MAX_BREAKS:
            del self.breaks[: len(self.breaks) - MAX_BREAKS // 2]
        self.times.append(at)
        self.used_gib.append(None if used_bytes is None else used_bytes / 2**30)
        self.total_gib.append(None if total_bytes is None else total_bytes / 2**30)
        self.util_pct, self.temp_c, self.power_w, self.source = util, temp, power, source
