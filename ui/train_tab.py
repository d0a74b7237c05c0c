"""The Train tab: the form, and the live view of the watched run. Wiring only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from backend import view
from backend.config import schema
from backend.service import RocBoard, RunView, demo_form
from ui.widgets import Texts, plot

TICK_S = 1.0
DIST_FIELDS = tuple(f.name for f in schema.plan_fields())
ALL_FIELDS = tuple(f.name for f in schema.page_fields())

# Element ids that tests and automation rely on (backend/config/schema.py: kebab-case of the names).
FIELD_IDS = schema.element_ids()
# The accordions the schema's sections go into, and whether each starts open.
SECTIONS_OPEN = {"": True, "method": False, "training": True, "multi_gpu": False}
WIDGETS: dict[str, tuple[type, dict[str, Any]]] = {
    "textbox": (gr.Textbox, {}),
    "lines": (gr.Textbox, {"lines": 3}),
    "number": (gr.Number, {}),
    "integer": (gr.Number, {"precision": 0}),
    "dropdown": (gr.Dropdown, {}),
    "radio": (gr.Radio, {}),
    "checkbox": (gr.Checkbox, {}),
}


def build_form_fields(
    texts: Texts,
    defaults: dict[str, Any],
    choices: dict[str, list[Any]] | None = None,
    after: dict[str, Any] | None = None,
    form_fields: tuple[schema.Field, ...] | None = None,
) -> dict[str, Any]:
    """A widget per schema field, grouped by section (an accordion) and row, in the schema's
    order. `choices` gives choices the page knows better (the presets); `after[name]()` runs
    right after that field's widget (the preset notes)."""
    widgets: dict[str, Any] = {}
    form_fields = schema.page_fields() if form_fields is None else form_fields
    sections = list(dict.fromkeys(f.section for f in form_fields))

    def build(form_field: schema.Field) -> None:
        widget_class, options = WIDGETS[form_field.widget]
        kwargs = dict(options)
        if form_field.widget in ("dropdown", "radio"):
            kwargs["choices"] = (choices or {}).get(form_field.name) or list(form_field.choice_labels or form_field.choices)
        widget = widget_class(value=defaults.get(form_field.name, form_field.default), elem_id=form_field.elem_id, label=texts(form_field.label_id), **kwargs)
        widgets[form_field.name] = texts.label(widget, form_field.label_id)
        if after and form_field.name in after:
            after[form_field.name]()

    def build_section(members: list[schema.Field]) -> None:
        index = 0
        while index < len(members):
            row = [members[index]]
            while members[index].row and index + len(row) < len(members) and members[index + len(row)].row == members[index].row:
                row.append(members[index + len(row)])
            if len(row) > 1:
                with gr.Row():
                    for member in row:
                        build(member)
            else:
                build(row[0])
            index += len(row)

    for section in sections:
        members = [f for f in form_fields if f.section == section]
        if not section:
            build_section(members)
            continue
        with texts.label(gr.Accordion(texts(f"accordion.{section}"), open=SECTIONS_OPEN.get(section, False)), f"accordion.{section}"):
            build_section(members)
    return widgets


@dataclass
class TrainTab:
    fields: dict[str, Any]
    watched_run: Any
    shown_version: Any
    run_outputs: list[Any]  # the run panel's components, in the order `show` and `render` update them
    timer: Any
    show: Any  # (RunView) -> updates for run_outputs
    render: Any  # (run_id, shown_version, locale) -> updates for run_outputs
    preset_notes: Any
    stop_on_nan: Any


def build_train_tab(board: RocBoard, texts: Texts, locale_state: Any) -> TrainTab:
    defaults = {**demo_form(), **schema.plan_form_defaults()}
    shown: dict[str, Any] = {}

    watched_run = gr.State(None)  # the run this tab shows
    shown_version = gr.State(None)  # what the tab last drew: nothing is sent when unchanged
    with gr.Row():
        with gr.Column(scale=2, min_width=360):
            notes = lambda: shown.setdefault("notes", gr.Markdown(view.preset_notes_markdown(board.preset(defaults["preset"])), elem_id="preset-notes"))  # noqa: E731
            fields = build_form_fields(texts, defaults, choices={"preset": board.preset_choices()}, after={"preset": notes})
            preset_notes = shown["notes"]
            estimate_box = gr.Markdown("", elem_id="estimate")
            findings_box = gr.Markdown("", elem_id="findings")
            doctor_box = gr.Markdown(board.doctor_blockers_markdown(defaults["preset"]), elem_id="doctor-blockers")
            with gr.Row():
                preview_button = texts.value(gr.Button(texts("button.preview"), elem_id="preview"), "button.preview")
                estimate_button = texts.value(gr.Button(texts("button.estimate"), elem_id="estimate-button"), "button.estimate")
            with gr.Row():
                start_button = texts.value(gr.Button(texts("button.start"), variant="primary", elem_id="start"), "button.start")
                stop_button = texts.value(gr.Button(texts("button.stop"), variant="stop", elem_id="stop"), "button.stop")
                resume_button = texts.value(gr.Button(texts("button.resume"), elem_id="resume"), "button.resume")
            stop_on_nan = texts.label(gr.Checkbox(False, label=texts("label.stop_on_nan"), elem_id="stop-on-nan"), "label.stop_on_nan")
        with gr.Column(scale=3):
            status = gr.Markdown(view.status_markdown(None), elem_id="status")
            alert = gr.Markdown("", elem_id="alert")
            progress = gr.HTML(view.progress_html(None), elem_id="progress")
            loss_chart = texts.label(gr.Plot(label=texts("label.loss_chart"), elem_id="loss-chart"), "label.loss_chart")
            memory_chart = texts.label(gr.Plot(label=texts("label.memory_chart"), elem_id="memory-chart"), "label.memory_chart")
            gpu_table = gr.Markdown("", elem_id="gpu-table")
            # A DownloadButton's words are its label; its value is the file.
            download = texts.label(
                gr.DownloadButton(texts("button.download"), value=None, interactive=False, elem_id="download"), "button.download"
            )
            with texts.label(gr.Accordion(texts("accordion.preview"), open=False), "accordion.preview") as preview_panel:
                preview_yaml = gr.Code(language="yaml", label="config.yaml", elem_id="preview-yaml")
                preview_command = gr.Code(language="shell", label="shell", elem_id="preview-command")
            with texts.label(gr.Accordion(texts("accordion.log"), open=False), "accordion.log"):
                log_tail = gr.Code(label="train.log", elem_id="log-tail")
    timer = gr.Timer(TICK_S, active=False)

    form_inputs = [fields[name] for name in ALL_FIELDS]
    # The run panel: each member of a RunView and the component that shows it, by name.
    panel = {
        "status": status,
        "alert": alert,
        "progress": progress,
        "loss_figure": loss_chart,
        "memory_figure": memory_chart,
        "gpu_table": gpu_table,
        "download": download,
        "log_tail": log_tail,
        "stop_on_nan": stop_on_nan,
        "version": shown_version,
        "timer": timer,
    }
    run_outputs = list(panel.values())

    def show(run: RunView) -> list[Any]:
        """The panel's updates for `run`, component by component; gr.skip() for what the tab
        already shows."""
        ticking = gr.skip() if run.unchanged and run.active else gr.Timer(active=run.active)
        updates: dict[str, Any] = {"timer": ticking}
        if not run.unchanged:
            updates.update(
                status=run.status,
                alert=run.alert,
                progress=run.progress,
                loss_figure=plot(run.loss_figure),
                memory_figure=plot(run.memory_figure),
                gpu_table=run.gpu_table,
                download=gr.update(value=None if run.download is None else str(run.download), interactive=run.download is not None),
                log_tail=run.log_tail,
                stop_on_nan=gr.skip() if run.stop_on_nan is None else run.stop_on_nan,
                version=run.version,
            )
        return [updates.get(name, gr.skip()) for name in panel]

    def form_of(values: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(ALL_FIELDS, values))

    def field_updates(findings, locale: str = "en") -> list[Any]:
        messages = view.field_messages(findings, ALL_FIELDS, locale)
        return [gr.update(info=messages[name] or None) for name in ALL_FIELDS]

    def on_preset(preset_id: str, locale: str):
        values = board.form_for_preset(preset_id)
        updates = [gr.update(value=values[name]) if name in values and name != "preset" else gr.skip() for name in ALL_FIELDS]
        return [*updates, view.preset_notes_markdown(board.preset(preset_id), locale), board.doctor_blockers_markdown(preset_id, locale)]

    # .input, not .change: filling the form must not re-fire when the value is set by code.
    fields["preset"].input(on_preset, [fields["preset"], locale_state], [*form_inputs, preset_notes, doctor_box], show_progress="hidden")

    def on_preview(locale, *values):
        result = board.preview(form_of(values))
        return [result.yaml_text, result.command, view.findings_markdown(result.findings, locale), gr.Accordion(open=True), *field_updates(result.findings, locale)]

    preview_button.click(on_preview, [locale_state, *form_inputs], [preview_yaml, preview_command, findings_box, preview_panel, *form_inputs])

    def on_estimate(locale, *values):
        return view.estimate_markdown(board.estimate(form_of(values)), locale)

    estimate_button.click(on_estimate, [locale_state, *form_inputs], estimate_box)

    def render(run_id: str | None, shown_version=None, locale: str = "en") -> list[Any]:
        """Everything the run panel shows of `run_id`; gr.skip() where nothing changed."""
        return show(board.run_view(run_id, locale, shown_version))

    def on_start(locale, stop_on_nan_value, *values):
        result = board.start(form_of(values), stop_on_nan=bool(stop_on_nan_value))
        findings_text = view.findings_markdown(result.findings, locale)
        if not result.started:
            return [gr.skip(), findings_text, *field_updates(result.findings, locale), *[gr.skip()] * len(run_outputs)]
        run_id = result.run.id
        return [run_id, findings_text, *field_updates(result.findings, locale), *render(run_id, None, locale)]

    start_button.click(
        on_start,
        [locale_state, stop_on_nan, *form_inputs],
        [watched_run, findings_box, *form_inputs, *run_outputs],
        concurrency_limit=1,
        concurrency_id="start",
    )

    def on_resume(run_id, locale):
        result = board.resume(run_id) if run_id else None
        if result is None or not result.started:
            findings = result.findings if result else []
            return [gr.skip(), view.findings_markdown(findings, locale), *[gr.skip()] * len(run_outputs)]
        return [result.run.id, "", *render(result.run.id, None, locale)]

    resume_button.click(on_resume, [watched_run, locale_state], [watched_run, findings_box, *run_outputs], concurrency_limit=1, concurrency_id="start")

    def on_stop(run_id, locale):
        if run_id is None:
            return [gr.skip()] * len(run_outputs)
        board.stop(run_id)
        return render(run_id, None, locale)

    stop_button.click(on_stop, [watched_run, locale_state], run_outputs, concurrency_limit=1, concurrency_id="stop")
    def on_stop_on_nan(run_id, on: bool):
        """The watched run's own setting follows the box while it trains (the backend acts
        on it); otherwise the box is the setting the next Start saves with its run."""
        if run_id is not None:
            board.set_stop_on_nan(run_id, bool(on))

    # .input, not .change: the panel sets the box to the watched run's setting by code.
    stop_on_nan.input(on_stop_on_nan, [watched_run, stop_on_nan], None, show_progress="hidden")
    timer.tick(render, [watched_run, shown_version, locale_state], run_outputs, show_progress="hidden", queue=False)
    return TrainTab(fields, watched_run, shown_version, run_outputs, timer, show, render, preset_notes, stop_on_nan)
