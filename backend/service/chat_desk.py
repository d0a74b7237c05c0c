"""The Chat tab's questions: load a run's adapter (and its base) into chat servers, stream answers.
(Scaffold: filled in by the chat work.)"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.runs import RunStore
    from backend.service.run_manager import RunManager


class ChatDesk:
    def __init__(self, store: "RunStore", run_manager: "RunManager", export_dir: Path):
        self.store = store
        self.run_manager = run_manager
        self.export_dir = export_dir

    def stop_all(self) -> None:
        """Stops every chat server (another run needs the GPU, or the app stops)."""

    def close(self) -> None:
        self.stop_all()
