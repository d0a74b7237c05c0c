"""The Chat tab: widgets and events only (scaffold: filled in by the chat work)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend.service import RocBoard
from ui.train_tab import TrainTab
from ui.widgets import Texts

CHAT_CSS = ""


def build_chat_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> dict[str, Any]:
    """Builds the tab's widgets and events; returns the widgets the page wires further by name
    (`refresh`: a callable for the tab's select event, `refresh_outputs`: its outputs)."""
    gr.Markdown("")
    return {}
