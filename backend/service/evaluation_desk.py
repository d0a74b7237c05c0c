"""The Evaluate tab's questions: predict with a run's adapter on held-out data, and its scores.
(Scaffold: filled in by the evaluation work.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.runs import RunStore
    from backend.service.data_desk import DataDesk
    from backend.service.pipeline import ConfigPipeline
    from backend.service.run_manager import RunManager


class EvaluationDesk:
    def __init__(self, store: "RunStore", run_manager: "RunManager", pipeline: "ConfigPipeline", data: "DataDesk"):
        self.store = store
        self.run_manager = run_manager
        self.pipeline = pipeline
        self.data = data
