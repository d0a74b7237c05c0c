"""The Import & Export tab: paste or upload a LLaMA-Factory YAML, see each wrong key with
its fix, apply the fixes, load it into the form; export the form as YAML + shell lines."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend import view
from backend.i18n import localized, translate
from backend.service import RocBoard
from backend.service.live import digest
from ui.train_tab import ALL_FIELDS, TrainTab, start_intent
from ui.widgets import Relabel, Texts

MAX_UPLOAD_BYTES = 256_000


def build_import_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> Relabel:
    form_fields = train.fields
    with gr.Row():
        with gr.Column():
            # What the YAML is judged against (bf16 or not, QLoRA bits, the CPU): the Train
            # form's preset until one is picked here; Load into the form gives the form this one.
            import_preset = texts.label(
                gr.Dropdown(board.preset_choices(), value=form_fields["preset"].value, label=texts("label.import_preset"), elem_id="import-preset", interactive=True),
                "label.import_preset",
            )
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

    # What each panel shows, kept as what it was made of, so that a language switch renders
    # it again in the new language: {"parts": [...], "shown": markdown}. A panel another event
    # has since rewritten (the form opened on a run) is left alone.
    panel_state = gr.State({})
    notice_state = gr.State({})

    def panel(parts: list[tuple], locale: str) -> str:
        """The Import tab's panel from its parts: ("findings", findings, say_clean) and ("message", id, params)."""
        out = []
        for part in parts:
            if part[0] == "findings":
                findings, clean = part[1], part[2]
                if findings:
                    out.append(view.findings_markdown(findings, locale))
                elif clean:
                    out.append("✓ " + translate("import.clean", locale))
            else:
                out.append(translate(part[1], locale, **part[2]))
        return "\n\n".join(text for text in out if text)

    def shown(parts: list[tuple], locale: str) -> tuple[str, dict]:
        text = panel(parts, locale)
        return text, {"parts": parts, "shown": text}

    def result_parts(result) -> list[tuple]:
        return [("findings", list(result.findings), bool(result.args))]

    def notice_of(load, preset_id: str, locale: str) -> tuple[str, dict]:
        text = view.form_load_markdown(load, locale, board.preset(preset_id))
        return text, {"load": load, "preset": preset_id, "shown": text}

    def on_upload(path: str | None, preset_id: str, locale: str):
        if not path:
            return gr.skip(), gr.skip(), gr.skip()
        # Uploads may be as big as a dataset (--max-upload-mb): read no more than a YAML may be.
        with open(path, "rb") as handle:
            data = handle.read(MAX_UPLOAD_BYTES + 1)
        text = data.decode("utf-8", errors="replace")
        return text, *shown(result_parts(board.import_yaml(text, preset_id)), locale)

    upload.upload(on_upload, [upload, import_preset, locale_state], [import_text, import_findings, panel_state])

    def on_import(text: str, preset_id: str, locale: str):
        return shown(result_parts(board.import_yaml(text, preset_id)), locale)

    import_button.click(on_import, [import_text, import_preset, locale_state], [import_findings, panel_state])

    def on_preset(text: str, preset_id: str, locale: str):
        """Another preset: the YAML shown is judged again (nothing to judge: nothing shown)."""
        if not (text or "").strip():
            return gr.skip(), gr.skip()
        return on_import(text, preset_id, locale)

    import_preset.change(on_preset, [import_text, import_preset, locale_state], [import_findings, panel_state], show_progress="hidden")
    # It follows the Train form's preset (picked there, or a run's opened); picked here, it
    # holds until the form's changes again.
    form_fields["preset"].change(lambda preset_id: preset_id, form_fields["preset"], import_preset, show_progress="hidden")

    def on_fix(text: str, preset_id: str, locale: str):
        fixed = board.fix_yaml(text, preset_id)
        parts = result_parts(fixed.result) + ([("message", fixed.message_id, {})] if fixed.message_id else [])
        return fixed.text, *shown(parts, locale)

    fix_button.click(on_fix, [import_text, import_preset, locale_state], [import_text, import_findings, panel_state])

    def loaded_form(preset_id: str, values: tuple) -> dict[str, Any]:
        """The form as it is, with the preset the YAML is judged against."""
        return {**dict(zip(ALL_FIELDS, values, strict=True)), "preset": preset_id}

    def on_load(text: str, run_id: str | None, locale: str, preset_id: str, *values: Any):
        """The YAML becomes a new run's form: what it sets, the preset's defaults for what it
        does not, the page's own fields left (the preset: the one it was judged against); the
        Train tab opens and says which was which."""
        load = board.load_into_form(text, preset_id, loaded_form(preset_id, values))
        parts = [("findings", list(load.findings), load.loaded)]
        notice, notice_value = notice_of(load, preset_id, locale)
        if not load.loaded:  # nothing usable: the form is left as it was, and the tab says so
            text_out, panel_value = shown([("message", "import.load_nothing", {}), *parts], locale)
            return [text_out, panel_value, gr.skip(), gr.skip(), *[gr.skip()] * len(train.open_outputs)]
        text_out, panel_value = shown(parts, locale)
        return [text_out, panel_value, notice_value, gr.Tabs(selected=train_tab_id), *train.edit_form(load.values, run_id, locale, notice, from_run=False)]

    load_button.click(
        on_load,
        [import_text, train.watched_run, locale_state, import_preset, *[form_fields[name] for name in ALL_FIELDS]],
        [import_findings, panel_state, notice_state, tabs, *train.open_outputs],
    )

    def on_run(text: str, locale: str, mode: Any, preset_id: str, request: gr.Request, *values: Any):
        """Every key of the YAML, checked and started like the form's Start; the Train tab
        then shows the run (its settings, Other keys included, read-only). Two clicks sent
        with one page state (a double-click) are one Start: the intent names that state."""
        mode = mode if isinstance(mode, dict) else {}
        intent = f"yaml:{mode.get('run_id')}:{start_intent(mode, request)}:{digest(text)}"
        load, result = board.start_yaml(text, preset_id, loaded_form(preset_id, values), intent=intent)
        findings = list(load.findings) + (list(result.findings) if result is not None else [])
        if result is None or result.run is None:  # not started
            text_out, panel_value = shown([("findings", findings, False), ("message", "import.run_refused", {})], locale)
            return [text_out, panel_value, gr.skip(), *[gr.skip()] * len(train.open_outputs)]
        text_out, panel_value = shown([("message", "import.run_started", {"run_id": result.run.id})], locale)
        return [text_out, panel_value, gr.Tabs(selected=train_tab_id), *train.open_run(result.run.id, locale)]

    run_button.click(
        on_run,
        [import_text, locale_state, train.mode, import_preset, *[form_fields[name] for name in ALL_FIELDS]],
        [import_findings, panel_state, tabs, *train.open_outputs],
        concurrency_limit=1,
        concurrency_id="start",
    )

    def same(a: Any, b: Any) -> bool:
        # Gradio hands a Markdown's value back dedented and stripped: compare the words.
        return " ".join(str(a or "").split()) == " ".join(str(b or "").split())

    def relabel(locale: str, panel_value: Any, panel_now: str, notice_value: Any, notice_now: str):
        """A language switch: the preset names, the panel and the form's import summary in the
        new language, where they still show what this tab wrote."""
        updates: list[Any] = [gr.update(choices=board.preset_choices(locale))]
        if isinstance(panel_value, dict) and panel_value.get("shown") and same(panel_value["shown"], panel_now):
            updates += list(shown(panel_value["parts"], locale))
        else:
            updates += [gr.skip(), gr.skip()]
        if isinstance(notice_value, dict) and notice_value.get("shown") and same(notice_value["shown"], notice_now):
            updates += list(notice_of(notice_value["load"], notice_value["preset"], locale))
        else:
            updates += [gr.skip(), gr.skip()]
        return updates

    def on_export(locale, *values):
        path, shell = board.export(dict(zip(ALL_FIELDS, values, strict=True)))
        return str(path), localized(shell, locale)  # its comment line in the page's language

    export_button.click(on_export, [locale_state, *[form_fields[name] for name in ALL_FIELDS]], [export_file, export_shell])
    return Relabel(relabel, [panel_state, import_findings, notice_state, train.notice_box], [import_preset, import_findings, panel_state, train.notice_box, notice_state])
