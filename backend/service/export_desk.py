"""The Export tab's questions: merge a run's adapter into its base, GGUF, where and how big.
(Scaffold: filled in by the export work.)"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from backend.runs import RunStore


class ExportDesk:
    def __init__(self, store: "RunStore", roots: Sequence[Path], export_dir: Path):
        self.store = store
        self.roots = [Path(root) for root in roots]
        self.export_dir = export_dir

    def close(self) -> None:
        """Stops an export in progress (its staging folder is removed)."""
