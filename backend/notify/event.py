"""What a notification is about: one RunEvent (backend/notify/__init__.py sends it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

KINDS = ("run_finished", "run_failed", "run_nan_stop", "run_stalled", "sweep_finished")


@dataclass(frozen=True)
class RunEvent:
    """One thing worth a word. `kind`: one of KINDS. `cause_id` / `cause_params`: a message id
    of the catalogue (diagnose.<rule>.cause, health.stall.problem, reason.*...) and its values,
    "" when there is none. `figures`: plain values (step, total, loss, eval_loss, minutes, runs,
    best_run...; the known ones are worded, all are in the JSON payload). `sweep_id`: the sweep
    a run belongs to, or the sweep that ended."""

    kind: str
    run_id: str
    state: str = ""
    cause_id: str = ""
    cause_params: dict[str, Any] = field(default_factory=dict, hash=False)
    figures: dict[str, Any] = field(default_factory=dict, hash=False)
    sweep_id: str = ""
    run_name: str = ""
    at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown event kind {self.kind!r}; one of {', '.join(KINDS)}")


__all__ = ["KINDS", "RunEvent"]
