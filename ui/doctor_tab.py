"""The Doctor tab: the machine's ROCm set-up, checked, with fixes."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend import view
from backend.i18n import translate
from backend.service import RocBoard
from ui.widgets import Texts

# The verdict ("✓ ok", "✓ 正常") stays on one line: Gradio's tables wrap anywhere, so a
# narrow first column split the mark from its word (and 正 from 常). A check's name breaks
# only between words: HSA_OVERRIDE_GFX_VERSION is never cut in the middle.
DOCTOR_CSS = """
#doctor-report td:first-child { white-space: nowrap; }
#doctor-report td:nth-child(2) { overflow-wrap: normal; word-break: normal; }
"""


def build_doctor_tab(board: RocBoard, texts: Texts, locale_state: Any, language: Any) -> None:
    run_button = texts.value(gr.Button(texts("button.run_doctor"), elem_id="doctor-run"), "button.run_doctor")
    report = gr.Markdown(texts("doctor.hint"), elem_id="doctor-report")
    checked = gr.State(False)  # whether this tab shows the checks (else the hint)

    def on_run(locale: str):
        return view.checks_markdown(board.doctor_checks(refresh=True), locale), True

    run_button.click(on_run, locale_state, [report, checked])

    def relabel(locale: str, shown: bool):
        """The report in the new language: the checks already gathered (no new probe), or the hint."""
        return view.checks_markdown(board.doctor_checks(), locale) if shown else translate("doctor.hint", locale)

    language.change(relabel, [language, checked], report, show_progress="hidden", queue=False)
