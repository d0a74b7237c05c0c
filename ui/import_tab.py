"""The Import & Export tab: paste or upload a LLaMA-Factory YAML, see each wrong key with
its fix, apply the fixes, load it into the form; export the form as YAML + shell lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gradio as gr

from backend import view
from backend.config import FORM_FIELDS
from ui.train_tab import ALL_FIELDS
from backend.i18n import translate
from backend.service import RocBoard
from ui.widgets import Texts

MAX_UPLOAD_BYTES = 256_000


def build_import_tab(board: RocBoard, texts: Texts, locale_state: Any, form_fields: dict[str, Any]) -> None:
    form_inputs = [form_fields[name] for name in FORM_FIELDS]
    with gr.Row():
        with gr.Column():
            import_text = texts.label(gr.Code(language="yaml", label=texts("label.import_yaml"), elem_id="import-yaml", interactive=True), "label.import_yaml")
            upload = texts.label(gr.File(label=texts("label.import_file"), file_types=[".yaml", ".yml"], type="filepath", elem_id="import-file"), "label.import_file")
            with gr.Row():
                import_button = texts.value(gr.Button(texts("button.import"), elem_id="import-button"), "button.import")
                fix_button = texts.value(gr.Button(texts("button.apply_fixes"), elem_id="apply-fixes"), "button.apply_fixes")
                load_button = texts.value(gr.Button(texts("button.load_into_form"), variant="primary", elem_id="load-into-form"), "button.load_into_form")
            import_findings = gr.Markdown("", elem_id="import-findings")
        with gr.Column():
            export_button = texts.value(gr.Button(texts("button.export"), elem_id="export-button"), "button.export")
            export_file = texts.label(gr.File(label=texts("label.export_yaml"), elem_id="export-yaml", interactive=False), "label.export_yaml")
            export_shell = texts.label(gr.Code(language="shell", label=texts("label.export_command"), elem_id="export-shell"), "label.export_command")

    def findings_text(result, locale: str) -> str:
        if not result.findings:
            return "✓ " + translate("import.clean", locale) if result.args else ""
        return view.findings_markdown(result.findings, locale)

    def on_upload(path: str | None, preset_id: str, locale: str):
        if not path:
            return gr.skip(), gr.skip()
        data = Path(path).read_bytes()[: MAX_UPLOAD_BYTES + 1]
        text = data.decode("utf-8", errors="replace")
        return text, findings_text(board.import_yaml(text, preset_id), locale)

    upload.upload(on_upload, [upload, form_fields["preset"], locale_state], [import_text, import_findings])

    def on_import(text: str, preset_id: str, locale: str):
        return findings_text(board.import_yaml(text, preset_id), locale)

    import_button.click(on_import, [import_text, form_fields["preset"], locale_state], import_findings)

    def on_fix(text: str, preset_id: str, locale: str):
        fixed, result = board.fix_yaml(text, preset_id)
        return fixed, findings_text(result, locale)

    fix_button.click(on_fix, [import_text, form_fields["preset"], locale_state], [import_text, import_findings])

    def on_load(text: str, preset_id: str, locale: str):
        result = board.import_yaml(text, preset_id)
        values = result.form_values
        updates = [gr.update(value=values[name]) if name in values else gr.skip() for name in FORM_FIELDS]
        return [*updates, findings_text(result, locale)]

    load_button.click(on_load, [import_text, form_fields["preset"], locale_state], [*form_inputs, import_findings])

    def on_export(*values):
        path, shell = board.export(dict(zip(ALL_FIELDS, values)))
        return str(path), shell

    export_button.click(on_export, [form_fields[name] for name in ALL_FIELDS], [export_file, export_shell])
