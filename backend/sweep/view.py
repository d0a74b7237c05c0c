"""A sweep's runs ranked by the metric the user picks (pure: rows in, order out).

Metrics: the final or the best eval loss, the final training loss (lower is better), and
the BLEU-4 / ROUGE scores of the run's latest finished evaluation (higher is better). A run
that has no value for the metric yet (still queued, no evaluation) is ranked after every run
that has one, in the sweep's own order; ties keep the sweep's order too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.runs.logs import MetricPoint

# metric -> True when lower is better
METRICS: dict[str, bool] = {
    "final_loss": True,
    "final_eval_loss": True,
    "best_eval_loss": True,
    "bleu4": False,
    "rouge1": False,
    "rouge2": False,
    "rougel": False,
}
DEFAULT_METRIC = "final_loss"


@dataclass(frozen=True)
class SweepRow:
    run_id: str
    name: str
    values: tuple[tuple[str, Any], ...]
    state: str
    step: int | None = None
    total_steps: int | None = None
    final_loss: float | None = None
    final_eval_loss: float | None = None
    best_eval_loss: float | None = None
    scores: tuple[tuple[str, float | None], ...] = ()  # bleu4, rouge1, rouge2, rougel
    tokens_per_s: float | None = None
    duration_s: float | None = None

    def metric(self, name: str) -> float | None:
        if name in ("final_loss", "final_eval_loss", "best_eval_loss"):
            value = getattr(self, name)
        else:
            value = dict(self.scores).get(name)
        return value if isinstance(value, (int, float)) and math.isfinite(value) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "name": self.name,
            "values": dict(self.values),
            "state": self.state,
            "step": self.step,
            "total_steps": self.total_steps,
            "final_loss": self.final_loss,
            "final_eval_loss": self.final_eval_loss,
            "best_eval_loss": self.best_eval_loss,
            "scores": dict(self.scores),
            "tokens_per_s": self.tokens_per_s,
            "duration_s": self.duration_s,
        }


def curve_figures(points: Sequence[MetricPoint]) -> dict[str, float | None]:
    """final_loss (the last training loss logged), final_eval_loss, best_eval_loss and
    tokens_per_s (the last throughput logged) of a run's trainer log."""
    losses = [p.loss for p in points if p.loss is not None and math.isfinite(p.loss)]
    evals = [p.eval_loss for p in points if p.eval_loss is not None and math.isfinite(p.eval_loss)]
    rates = [p.throughput for p in points if p.throughput]
    return {
        "final_loss": losses[-1] if losses else None,
        "final_eval_loss": evals[-1] if evals else None,
        "best_eval_loss": min(evals) if evals else None,
        "tokens_per_s": rates[-1] if rates else None,
    }


def rank(rows: Sequence[SweepRow], metric: str) -> list[SweepRow]:
    """`rows` best first by `metric` (ValueError for a metric that is not one of METRICS)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}")
    lower = METRICS[metric]

    def key(item: tuple[int, SweepRow]) -> tuple[int, float, int]:
        index, row = item
        value = row.metric(metric)
        if value is None:
            return (1, 0.0, index)
        return (0, value if lower else -value, index)

    return [row for _, row in sorted(enumerate(rows), key=key)]


def best_run(ranked: Sequence[SweepRow], metric: str) -> str:
    """The id of the best run that has a value for `metric` ("" for none yet)."""
    return next((row.run_id for row in ranked if row.metric(metric) is not None), "")


__all__ = ["DEFAULT_METRIC", "METRICS", "SweepRow", "best_run", "curve_figures", "rank"]


# --- early stop of clearly losing runs ------------------------------------------------------
# The rule (opt-in per sweep: `app.py sweep --early-stop K,MARGIN`): a run that trains and has
# logged at least K eval points is stopped when its latest eval loss, at step s, is worse than
# the median eval loss of the sweep's runs at that same step s by more than MARGIN (relative:
# loss > median x (1 + MARGIN)), counting only steps at which at least three of the sweep's runs
# have an eval loss (the median of two is their mean: one bad run would move it). Runs of one
# sweep share eval_steps unless it is varied; then few steps are shared and the rule rarely acts.
EARLY_STOP_MIN_RUNS = 3


@dataclass(frozen=True)
class Losing:
    run_id: str
    step: int
    eval_loss: float
    median: float


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def eval_points(points: Sequence[MetricPoint]) -> dict[int, float]:
    """step -> eval loss (the last one logged at that step)."""
    return {p.step: p.eval_loss for p in points if p.eval_loss is not None and math.isfinite(p.eval_loss)}


def losing_runs(evals: dict[str, dict[int, float]], training: set[str], after_evals: int, margin: float) -> list[Losing]:
    """The runs of `training` the rule above stops, given every run's eval losses by step."""
    losing = []
    for run_id in training:
        own = evals.get(run_id, {})
        if len(own) < after_evals:
            continue
        step = max(own)
        at_step = [points[step] for points in evals.values() if step in points]
        if len(at_step) < EARLY_STOP_MIN_RUNS:
            continue
        median = _median(at_step)
        if own[step] > median * (1 + margin):
            losing.append(Losing(run_id, step, own[step], median))
    return sorted(losing, key=lambda item: item.run_id)


__all__ += ["EARLY_STOP_MIN_RUNS", "Losing", "eval_points", "losing_runs"]
