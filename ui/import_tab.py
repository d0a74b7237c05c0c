"""The Import & Export tab: paste or upload a LLaMA-Factory YAML, see each wrong key with
its fix, apply the fixes, load it into the form; export the form as YAML + shell lines."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend import view
from ui.train_tab import ALL_FIELDS, TrainTab, start_intent
from backend.i18n import translate
from backend.service import RocBoard
from backend.service.live import digest
from ui.widgets import Texts

MAX_UPLOAD_BYTES = 256_000


def build_import_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> None:
    form_fields = train.fields
    with gr.Row():
        with gr.Column():
            import_text = texts.label(gr.Code(language="yaml", label=texts("label.import_yaml"), elem_id="import-yaml", interactive=True), "label.import_yaml")
            upload = texts.label(gr.File(label=texts("label.import_file"), file_types=[".yaml", ".yml"], type="filepath", elem_id="import-file"), "label.import_file")
            with gr.Row():
                import_button = texts.value(gr.Button(texts("button.import"), elem_id="import-button"), "button.import")
                fix_button = texts.value(gr.Button(texts("button.apply_fixes"), elem_id="apply-fixes"), "button.apply_fixes")
                load_button = texts.value(gr.Button(texts("button.load_into_form"), variant="primary", elem_id="load-into-form"), "button.load_into_form")
                run_button = texts.value(gr.Button(texts("button.run_yaml"), elem_id="run-yaml"), "button.run_yaml")
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
        # Uploads may be as big as a dataset (--max-upload-mb): read no more than a YAML may be.
        with open(path, "rb") as handle:
            data = handle.read(MAX_UPLOAD_BYTES + 1)
        text = data.decode("utf-8", errors="replace")
        return text, findings_text(board.import_yaml(text, preset_id), locale)

    upload.upload(on_upload, [upload, form_fields["preset"], locale_state], [import_text, import_findings])

    def on_import(text: str, preset_id: str, locale: str):
        return findings_text(board.import_yaml(text, preset_id), locale)

    import_button.click(on_import, [import_text, form_fields["preset"], locale_state], import_findings)

    def on_fix(text: str, preset_id: str, locale: str):
        fixed = board.fix_yaml(text, preset_id)
        lost = f"\n\n{translate(fixed.message_id, locale)}" if fixed.message_id else ""
        return fixed.text, findings_text(fixed.result, locale) + lost

    fix_button.click(on_fix, [import_text, form_fields["preset"], locale_state], [import_text, import_findings])

    def on_load(text: str, run_id: str | None, locale: str, *values: Any):
        """The YAML becomes a new run's form: what it sets, the preset's defaults for what it
        does not, the page's own fields left; the Train tab opens and says which was which."""
        load = board.load_into_form(text, str(values[ALL_FIELDS.index("preset")]), dict(zip(ALL_FIELDS, values)))
        findings = view.findings_markdown(load.findings, locale) if load.findings else ""
        if not load.loaded:  # nothing usable: the form is left as it was, and the tab says so
            return [view.form_load_markdown(load, locale) + ("\n\n" + findings if findings else ""), gr.skip(), *[gr.skip()] * len(train.open_outputs)]
        notice = view.form_load_markdown(load, locale)
        return [findings or "✓ " + translate("import.clean", locale), gr.Tabs(selected=train_tab_id), *train.edit_form(load.values, run_id, locale, notice, from_run=False)]

    load_button.click(
        on_load,
        [import_text, train.watched_run, locale_state, *[form_fields[name] for name in ALL_FIELDS]],
        [import_findings, tabs, *train.open_outputs],
    )

    def on_run(text: str, locale: str, mode: Any, request: gr.Request, *values: Any):
        """Every key of the YAML, checked and started like the form's Start; the Train tab
        then shows the run (its settings, Other keys included, read-only). Two clicks sent
        with one page state (a double-click) are one Start: the intent names that state."""
        mode = mode if isinstance(mode, dict) else {}
        intent = f"yaml:{mode.get('run_id')}:{start_intent(mode, request)}:{digest(text)}"
        load, result = board.start_yaml(text, str(values[ALL_FIELDS.index("preset")]), dict(zip(ALL_FIELDS, values)), intent=intent)
        findings = list(load.findings) + (list(result.findings) if result is not None else [])
        if result is None or not result.started:
            text_out = (view.findings_markdown(findings, locale) + "\n\n" if findings else "") + translate("import.run_refused", locale)
            return [text_out, gr.skip(), *[gr.skip()] * len(train.open_outputs)]
        started = translate("import.run_started", locale, run_id=result.run.id)
        return [started, gr.Tabs(selected=train_tab_id), *train.open_run(result.run.id, locale)]

    run_button.click(
        on_run,
        [import_text, locale_state, train.mode, *[form_fields[name] for name in ALL_FIELDS]],
        [import_findings, tabs, *train.open_outputs],
        concurrency_limit=1,
        concurrency_id="start",
    )

    def on_export(*values):
        path, shell = board.export(dict(zip(ALL_FIELDS, values)))
        return str(path), shell

    export_button.click(on_export, [form_fields[name] for name in ALL_FIELDS], [export_file, export_shell])
