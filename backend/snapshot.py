"""One run at a moment: its state and what its files say so far.

Data only: the service's monitors build it (backend/service/monitors.py) and the page's
words are computed from it (backend/view.py), so both import it and neither the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.charts import MemorySeries
from backend.runs import RunState
from backend.runs.logs import AttemptMark, Entry, MetricPoint


@dataclass(frozen=True)
class RunSnapshot:
    run: RunState
    points: list[MetricPoint]
    memory: list[MemorySeries]
    memory_label: str
    log_tail: str
    has_adapter: bool
    garbage_lines: int
    alert: str | None  # NaN/inf loss or exploding gradients, said at once
    version: tuple  # changes whenever anything the page shows changes
    # The loss chart's drawn curves (MetricSeries.chart), kept as the points arrived; None:
    # the chart is computed from `points`.
    chart: dict[str, list[Entry]] | None = None
    # Where each resumed attempt begins in the curve (MetricSeries.attempts), and on the
    # memory chart: (attempt, seconds since the first reading) of each resume.
    attempts: tuple[AttemptMark, ...] = ()
    memory_breaks: tuple[tuple[int, float], ...] = ()


__all__ = ["RunSnapshot"]
