"""The validation report: typed records, JSON round trip, storage under the runs folder.

A report is what a validation path proved: one RungResult per rung asked, the machine's
fingerprint and the data fingerprint. Every word a user reads is a message id + params
(`Note`), rendered at the edge (backend/validate/view.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RUNGS = ("one_gpu", "n_gpus", "fault_drill", "nodes")
STATUSES = ("pass", "fail", "stopped", "skipped")
MAX_CURVE_POINTS = 5000

Figure = float | int | str


@dataclass(frozen=True)
class Note:
    """One thing to tell the user: a message id of the locale catalogues and its params."""

    message_id: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RungResult:
    rung: str  # one of RUNGS
    status: str  # one of STATUSES
    run_ids: tuple[str, ...] = ()  # the real runs the rung made (in the runs folder)
    # e.g. final_loss, max_loss_gap, tokens_per_s, steps_per_s,
    # vram_peak_mib_per_gpu ("0:123,1:120"), scaling_efficiency, resumed_from_step
    figures: dict[str, Figure] = field(default_factory=dict)
    causes: tuple[Note, ...] = ()  # on fail: the named cause and its fix
    curve: tuple[tuple[int, float], ...] = ()  # (step, loss), at most MAX_CURVE_POINTS


@dataclass(frozen=True)
class ValidationReport:
    id: str
    created_at: float
    # preset, model, dataset, gpus, drill_step, tolerance, rungs (asked)
    request: dict[str, Any]
    rungs: tuple[RungResult, ...]
    machine: dict[str, str]  # the machine fingerprint
    data_fingerprint: str | None = None
