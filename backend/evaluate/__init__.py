"""Evaluating a trained run: LLaMA-Factory's predict mode on held-out data, as a run of its own.

- `results`: what the predict run wrote (scores, predictions, progress), read bounded.
- `plan`: the evaluation's LLaMA-Factory arguments, from the trained run's form and a request.

See docs/evaluate.md.
"""

from backend.evaluate.results import (
    EVALUATION_FILE,
    PREDICTIONS_FILE,
    RESULTS_FILE,
    Prediction,
    PredictProgress,
    Scores,
    format_scores,
    parse_predictions,
    parse_progress,
    parse_scores,
    read_predictions,
    read_progress,
    read_scores,
)

__all__ = [
    "EVALUATION_FILE",
    "PREDICTIONS_FILE",
    "RESULTS_FILE",
    "PredictProgress",
    "Prediction",
    "Scores",
    "format_scores",
    "parse_predictions",
    "parse_progress",
    "parse_scores",
    "read_predictions",
    "read_progress",
    "read_scores",
]
