"""The Train tab: the form, and the live view of the watched run. Wiring only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from backend import view
from backend.charts import loss_figure, memory_figure
from backend.config import FINETUNING_TYPES, FLASH_ATTN_CHOICES, FORM_FIELDS, PRECISIONS
from backend.distributed import PLAN_FORM_DEFAULTS, STRATEGY_LABELS
from backend.i18n import translate
from backend.runs import RunNotFound
from backend.service import RocBoard, demo_form
from ui.widgets import Texts, plot

TICK_S = 1.0
DIST_FIELDS = tuple(PLAN_FORM_DEFAULTS)
ALL_FIELDS = FORM_FIELDS + DIST_FIELDS

# Element ids that tests and automation rely on (kebab-case of the form field names).
FIELD_IDS = {name: name.replace("_", "-") for name in ALL_FIELDS}
FIELD_IDS.update(model_path="model-path", num_train_epochs="epochs")


@dataclass
class TrainTab:
    fields: dict[str, Any]
    watched_run: Any
    shown_version: Any
    run_outputs: list[Any]
    timer: Any
    render: Any  # (run_id, last_version, locale, stop_on_nan) -> updates for run_outputs
    preset_notes: Any


def build_train_tab(board: RocBoard, texts: Texts, locale_state: Any) -> TrainTab:
    defaults = {**demo_form(), **PLAN_FORM_DEFAULTS}
    fields: dict[str, Any] = {}

    def field(name: str, widget_class: type, **kwargs: Any) -> Any:
        widget = widget_class(value=defaults[name], elem_id=FIELD_IDS[name], **kwargs)
        fields[name] = texts.label(widget, f"label.{name}")
        return widget

    watched_run = gr.State(None)  # the run this tab shows
    shown_version = gr.State(None)  # what the tab last drew: nothing is sent when unchanged
    with gr.Row():
        with gr.Column(scale=2, min_width=360):
            field("preset", gr.Dropdown, choices=board.preset_choices(), label=texts("label.preset"))
            preset_notes = gr.Markdown(view.preset_notes_markdown(board.preset(defaults["preset"])), elem_id="preset-notes")
            field("model_path", gr.Textbox, label=texts("label.model_path"))
            field("template", gr.Textbox, label=texts("label.template"))
            with gr.Row():
                field("dataset_dir", gr.Textbox, label=texts("label.dataset_dir"))
                field("dataset", gr.Textbox, label=texts("label.dataset"))
            with texts.label(gr.Accordion(texts("accordion.method"), open=False), "accordion.method"):
                field("finetuning_type", gr.Radio, choices=list(FINETUNING_TYPES), label=texts("label.finetuning_type"))
                with gr.Row():
                    field("lora_rank", gr.Number, precision=0, label=texts("label.lora_rank"))
                    field("lora_alpha", gr.Number, precision=0, label=texts("label.lora_alpha"))
                    field("lora_dropout", gr.Number, label=texts("label.lora_dropout"))
                field("lora_target", gr.Textbox, label=texts("label.lora_target"))
                field("quantization_bit", gr.Dropdown, choices=["none", "8", "4"], label=texts("label.quantization_bit"))
            with texts.label(gr.Accordion(texts("accordion.training"), open=True), "accordion.training"):
                with gr.Row():
                    field("learning_rate", gr.Textbox, label=texts("label.learning_rate"))
                    field("max_steps", gr.Number, precision=0, label=texts("label.max_steps"))
                    field("num_train_epochs", gr.Number, label=texts("label.num_train_epochs"))
                with gr.Row():
                    field("batch_size", gr.Number, precision=0, label=texts("label.batch_size"))
                    field("grad_accum", gr.Number, precision=0, label=texts("label.grad_accum"))
                    field("cutoff_len", gr.Number, precision=0, label=texts("label.cutoff_len"))
                with gr.Row():
                    field("precision", gr.Radio, choices=list(PRECISIONS), label=texts("label.precision"))
                    field("flash_attn", gr.Dropdown, choices=list(FLASH_ATTN_CHOICES), label=texts("label.flash_attn"))
                    field("gradient_checkpointing", gr.Checkbox, label=texts("label.gradient_checkpointing"))
                with gr.Row():
                    field("logging_steps", gr.Number, precision=0, label=texts("label.logging_steps"))
                    field("save_steps", gr.Number, precision=0, label=texts("label.save_steps"))
                    field("run_name", gr.Textbox, label=texts("label.run_name"))
            with texts.label(gr.Accordion(texts("accordion.multi_gpu"), open=False), "accordion.multi_gpu"):
                with gr.Row():
                    field("dist_nproc", gr.Number, precision=0, label=texts("label.dist_nproc"))
                    field("dist_gpus", gr.Textbox, label=texts("label.dist_gpus"))
                    field("dist_strategy", gr.Dropdown, choices=[(text, key) for key, text in STRATEGY_LABELS.items()], label=texts("label.dist_strategy"))
                with gr.Row():
                    field("dist_offload", gr.Checkbox, label=texts("label.dist_offload"))
                    field("dist_ddp_timeout_s", gr.Number, precision=0, label=texts("label.dist_ddp_timeout_s"))
                field("dist_rccl_env", gr.Textbox, lines=3, label=texts("label.dist_rccl_env"))
                with gr.Row():
                    field("dist_nnodes", gr.Number, precision=0, label=texts("label.dist_nnodes"))
                    field("dist_node_rank", gr.Number, precision=0, label=texts("label.dist_node_rank"))
                    field("dist_master_addr", gr.Textbox, label=texts("label.dist_master_addr"))
                    field("dist_master_port", gr.Number, precision=0, label=texts("label.dist_master_port"))
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
    run_outputs = [status, alert, progress, loss_chart, memory_chart, gpu_table, download, log_tail, shown_version, timer]

    def form_of(values: tuple[Any, ...]) -> dict[str, Any]:
        return dict(zip(ALL_FIELDS, values))

    def field_updates(findings, locale: str = "en") -> list[Any]:
        messages = view.field_messages(findings, ALL_FIELDS, locale)
        return [gr.update(info=messages[name] or None) for name in ALL_FIELDS]

    def on_preset(preset_id: str, locale: str):
        values = board.form_for_preset(preset_id)
        updates = [gr.update(value=values[name]) if name in values and name != "preset" else gr.skip() for name in ALL_FIELDS]
        return [*updates, view.preset_notes_markdown(board.preset(preset_id), locale), board.doctor_blockers_markdown(preset_id)]

    # .input, not .change: filling the form must not re-fire when the value is set by code.
    fields["preset"].input(on_preset, [fields["preset"], locale_state], [*form_inputs, preset_notes, doctor_box], show_progress="hidden")

    def on_preview(locale, *values):
        result = board.preview(form_of(values))
        return [result.yaml_text, result.command, view.findings_markdown(result.findings, locale), gr.Accordion(open=True), *field_updates(result.findings, locale)]

    preview_button.click(on_preview, [locale_state, *form_inputs], [preview_yaml, preview_command, findings_box, preview_panel, *form_inputs])

    def on_estimate(locale, *values):
        return view.estimate_markdown(board.estimate(form_of(values)), locale)

    estimate_button.click(on_estimate, [locale_state, *form_inputs], estimate_box)

    def render(run_id: str | None, last_version, locale: str = "en", stop_on_nan: bool = False):
        """Everything the run panel shows; gr.skip() where nothing changed."""
        if run_id is None:
            return [gr.skip()] * len(run_outputs)
        try:
            snapshot = board.snapshot(run_id)
        except RunNotFound:
            gone = view.run_gone_markdown(run_id, locale)
            return [gone, "", view.progress_html(None, locale), None, None, "", gr.update(value=None, interactive=False), "", None, gr.Timer(active=False)]
        alert_text = view.alert_markdown(snapshot, locale)
        if alert_text and stop_on_nan and snapshot.run.active:
            snapshot = board.stop_for_alert(run_id)
        timer_update = gr.skip() if snapshot.run.active else gr.Timer(active=False)
        version = (snapshot.version, locale)
        if version == last_version:
            return [gr.skip()] * (len(run_outputs) - 1) + [timer_update]
        cause = fix = ""
        if snapshot.run.state == "failed":
            cause, fix = board.failure_cause(run_id, locale)
        download_update = gr.update(value=None, interactive=False)
        if snapshot.has_adapter and not snapshot.run.active:
            download_update = gr.update(value=str(board.adapter_download(run_id)), interactive=True)
        return [
            view.status_markdown(snapshot, cause, fix, locale),
            view.alert_markdown(snapshot, locale),
            view.progress_html(snapshot, locale),
            plot(loss_figure(snapshot.points, title=translate("chart.loss", locale), names=view.loss_chart_names(locale))),
            plot(memory_figure(snapshot.memory, view.memory_title(snapshot, locale), names=view.memory_chart_names(locale))),
            view.gpu_table_markdown(snapshot, locale),
            download_update,
            snapshot.log_tail,
            version,
            timer_update,
        ]

    def on_start(locale, *values):
        result = board.start(form_of(values))
        findings_text = view.findings_markdown(result.findings, locale)
        if not result.started:
            return [gr.skip(), findings_text, *field_updates(result.findings, locale), *[gr.skip()] * len(run_outputs)]
        run_id = result.run.id
        outputs = render(run_id, None, locale)
        outputs[-1] = gr.Timer(active=True)
        return [run_id, findings_text, *field_updates(result.findings, locale), *outputs]

    start_button.click(
        on_start,
        [locale_state, *form_inputs],
        [watched_run, findings_box, *form_inputs, *run_outputs],
        concurrency_limit=1,
        concurrency_id="start",
    )

    def on_resume(run_id, locale):
        result = board.resume(run_id) if run_id else None
        if result is None or not result.started:
            findings = result.findings if result else []
            return [gr.skip(), view.findings_markdown(findings, locale), *[gr.skip()] * len(run_outputs)]
        outputs = render(result.run.id, None, locale)
        outputs[-1] = gr.Timer(active=True)
        return [result.run.id, "", *outputs]

    resume_button.click(on_resume, [watched_run, locale_state], [watched_run, findings_box, *run_outputs], concurrency_limit=1, concurrency_id="start")

    def on_stop(run_id, locale):
        if run_id is None:
            return [gr.skip()] * len(run_outputs)
        board.stop(run_id)
        return render(run_id, None, locale)

    stop_button.click(on_stop, [watched_run, locale_state], run_outputs, concurrency_limit=1, concurrency_id="stop")
    timer.tick(render, [watched_run, shown_version, locale_state, stop_on_nan], run_outputs, show_progress="hidden", queue=False)
    return TrainTab(fields, watched_run, shown_version, run_outputs, timer, render, preset_notes)
