"""The Doctor tab: the machine's ROCm set-up, checked, with fixes."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend import view
from backend.service import RocBoard
from ui.widgets import Texts


def build_doctor_tab(board: RocBoard, texts: Texts, locale_state: Any) -> None:
    run_button = texts.value(gr.Button(texts("button.run_doctor"), elem_id="doctor-run"), "button.run_doctor")
    report = gr.Markdown(texts("doctor.hint"), elem_id="doctor-report")

    def on_run(locale: str):
        return view.checks_markdown(board.doctor_checks(refresh=True), locale)

    run_button.click(on_run, locale_state, report)
