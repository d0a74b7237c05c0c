"""The page: Gradio widgets wired to backend functions. No logic lives here."""

from __future__ import annotations

from typing import Any

import gradio as gr
from gradio.components.plot import PlotData

from backend import view
from backend.charts import loss_figure, memory_figure
from backend.config import FINETUNING_TYPES, FLASH_ATTN_CHOICES, FORM_FIELDS, PRECISIONS
from backend.service import RocBoard, RunSnapshot, demo_form
from backend.runs import RunNotFound

TICK_S = 1.0


def _plot(figure: dict) -> PlotData:
    import json

    return PlotData(type="plotly", plot=json.dumps(figure))


def build_ui(board: RocBoard) -> gr.Blocks:
    defaults = demo_form()
    with gr.Blocks(title="RocBoard", css=view.PROGRESS_CSS, theme=gr.themes.Default(primary_hue="red")) as page:
        gr.Markdown("# RocBoard\nFine-tune LLMs with LLaMA-Factory on AMD GPUs.")
        watched_run = gr.State(None)  # the run this tab shows
        shown_version = gr.State(None)  # what the tab last drew: nothing is sent when unchanged
        with gr.Row():
            with gr.Column(scale=2, min_width=360):
                fields: dict[str, gr.components.Component] = {}
                fields["preset"] = gr.Dropdown(
                    board.preset_choices(), value=defaults["preset"], label="Hardware preset", elem_id="preset"
                )
                fields["model_path"] = gr.Textbox(defaults["model_path"], label="Model path (local folder)", elem_id="model-path")
                fields["template"] = gr.Textbox(defaults["template"], label="Chat template", elem_id="template")
                with gr.Row():
                    fields["dataset_dir"] = gr.Textbox(defaults["dataset_dir"], label="Dataset folder", elem_id="dataset-dir")
                    fields["dataset"] = gr.Textbox(defaults["dataset"], label="Dataset(s), comma-separated", elem_id="dataset")
                with gr.Accordion("Method", open=False):
                    fields["finetuning_type"] = gr.Radio(list(FINETUNING_TYPES), value=defaults["finetuning_type"], label="Fine-tuning type", elem_id="finetuning-type")
                    with gr.Row():
                        fields["lora_rank"] = gr.Number(defaults["lora_rank"], label="LoRA rank", precision=0, elem_id="lora-rank")
                        fields["lora_alpha"] = gr.Number(defaults["lora_alpha"], label="LoRA alpha", precision=0, elem_id="lora-alpha")
                        fields["lora_dropout"] = gr.Number(defaults["lora_dropout"], label="LoRA dropout", elem_id="lora-dropout")
                    fields["lora_target"] = gr.Textbox(defaults["lora_target"], label="LoRA target modules", elem_id="lora-target")
                    fields["quantization_bit"] = gr.Dropdown(["none", "8", "4"], value=defaults["quantization_bit"], label="QLoRA quantization (bits)", elem_id="quantization-bit")
                with gr.Accordion("Training", open=True):
                    with gr.Row():
                        fields["learning_rate"] = gr.Textbox(str(defaults["learning_rate"]), label="Learning rate", elem_id="learning-rate")
                        fields["max_steps"] = gr.Number(defaults["max_steps"], label="Max steps (0 = use epochs)", precision=0, elem_id="max-steps")
                        fields["num_train_epochs"] = gr.Number(defaults["num_train_epochs"], label="Epochs", elem_id="epochs")
                    with gr.Row():
                        fields["batch_size"] = gr.Number(defaults["batch_size"], label="Batch size per device", precision=0, elem_id="batch-size")
                        fields["grad_accum"] = gr.Number(defaults["grad_accum"], label="Gradient accumulation", precision=0, elem_id="grad-accum")
                        fields["cutoff_len"] = gr.Number(defaults["cutoff_len"], label="Cutoff length (tokens)", precision=0, elem_id="cutoff-len")
                    with gr.Row():
                        fields["precision"] = gr.Radio(list(PRECISIONS), value=defaults["precision"], label="Precision", elem_id="precision")
                        fields["flash_attn"] = gr.Dropdown(list(FLASH_ATTN_CHOICES), value=defaults["flash_attn"], label="flash_attn", elem_id="flash-attn")
                        fields["gradient_checkpointing"] = gr.Checkbox(defaults["gradient_checkpointing"], label="Gradient checkpointing", elem_id="gradient-checkpointing")
                    with gr.Row():
                        fields["logging_steps"] = gr.Number(defaults["logging_steps"], label="Logging steps", precision=0, elem_id="logging-steps")
                        fields["save_steps"] = gr.Number(defaults["save_steps"], label="Save steps", precision=0, elem_id="save-steps")
                        fields["run_name"] = gr.Textbox(defaults["run_name"], label="Run name", elem_id="run-name")
                findings_box = gr.Markdown("", elem_id="findings")
                with gr.Row():
                    preview_button = gr.Button("Preview", elem_id="preview")
                    start_button = gr.Button("Start", variant="primary", elem_id="start")
                    stop_button = gr.Button("Stop", variant="stop", elem_id="stop")
            with gr.Column(scale=3):
                status = gr.Markdown(view.status_markdown(None), elem_id="status")
                progress = gr.HTML(view.progress_html(None), elem_id="progress")
                loss_chart = gr.Plot(label="Loss", elem_id="loss-chart")
                memory_chart = gr.Plot(label="Memory", elem_id="memory-chart")
                download = gr.DownloadButton("Download adapter (.zip)", value=None, interactive=False, elem_id="download")
                with gr.Accordion("Preview: YAML and command", open=False) as preview_panel:
                    preview_yaml = gr.Code(language="yaml", label="config.yaml", elem_id="preview-yaml")
                    preview_command = gr.Code(language="shell", label="Run it by hand", elem_id="preview-command")
                with gr.Accordion("Trainer log (last lines)", open=False):
                    log_tail = gr.Code(label="train.log", elem_id="log-tail")
        timer = gr.Timer(TICK_S, active=False)

        form_inputs = [fields[name] for name in FORM_FIELDS]
        field_outputs = [fields[name] for name in FORM_FIELDS]

        def form_of(values: tuple[Any, ...]) -> dict[str, Any]:
            return dict(zip(FORM_FIELDS, values))

        def field_updates(findings) -> list[Any]:
            messages = view.field_messages(findings, FORM_FIELDS)
            return [gr.update(info=messages[name] or None) for name in FORM_FIELDS]

        def on_preset(preset_id: str):
            values = board.form_for_preset(preset_id)
            return [gr.update(value=values[name]) if name in values and name != "preset" else gr.skip() for name in FORM_FIELDS]

        fields["preset"].change(on_preset, fields["preset"], field_outputs, show_progress="hidden")

        def on_preview(*values):
            result = board.preview(form_of(values))
            return [result.yaml_text, result.command, view.findings_markdown(result.findings), gr.Accordion(open=True), *field_updates(result.findings)]

        preview_button.click(on_preview, form_inputs, [preview_yaml, preview_command, findings_box, preview_panel, *field_outputs])

        def render(run_id: str | None, last_version):
            """Everything the run panel shows; gr.skip() where nothing changed."""
            outputs = [status, progress, loss_chart, memory_chart, download, log_tail, shown_version, timer]
            if run_id is None:
                return [gr.skip()] * len(outputs)
            try:
                snapshot = board.snapshot(run_id)
            except RunNotFound:
                return [view.status_markdown(None), view.progress_html(None), None, None, gr.update(value=None, interactive=False), "", None, gr.Timer(active=False)]
            timer_update = gr.skip() if snapshot.run.active else gr.Timer(active=False)
            if snapshot.version == last_version:
                return [gr.skip()] * 7 + [timer_update]
            return [*draw(snapshot), snapshot.version, timer_update]

        def draw(snapshot: RunSnapshot) -> list[Any]:
            cause = fix = ""
            if snapshot.run.state == "failed":
                cause, fix = board.failure_cause(snapshot.run.id)
            download_update = gr.update(value=None, interactive=False)
            if snapshot.has_adapter and not snapshot.run.active:
                download_update = gr.update(value=str(board.adapter_download(snapshot.run.id)), interactive=True)
            memory_title = snapshot.memory_label or "Memory"
            return [
                view.status_markdown(snapshot, cause, fix),
                view.progress_html(snapshot),
                _plot(loss_figure(snapshot.points)),
                _plot(memory_figure(snapshot.memory, memory_title)),
                download_update,
                snapshot.log_tail,
            ]

        run_outputs = [status, progress, loss_chart, memory_chart, download, log_tail, shown_version, timer]

        def on_start(*values):
            result = board.start(form_of(values))
            findings_text = view.findings_markdown(result.findings)
            if not result.started:
                return [None, findings_text, *field_updates(result.findings), *[gr.skip()] * len(run_outputs)]
            run_id = result.run.id
            return [run_id, findings_text, *field_updates(result.findings), *render(run_id, None)[:-1], gr.Timer(active=True)]

        start_button.click(
            on_start,
            form_inputs,
            [watched_run, findings_box, *field_outputs, *run_outputs],
            concurrency_limit=1,
            concurrency_id="start",
        )

        def on_stop(run_id):
            if run_id is None:
                return [gr.skip()] * len(run_outputs)
            board.stop(run_id)
            return render(run_id, None)

        stop_button.click(on_stop, watched_run, run_outputs, concurrency_limit=1, concurrency_id="stop")
        timer.tick(render, [watched_run, shown_version], run_outputs, show_progress="hidden", queue=False)

        def on_load():
            run = board.run_to_show()
            if run is None:
                return [None, *[gr.skip()] * len(run_outputs)]
            outputs = render(run.id, None)
            outputs[-1] = gr.Timer(active=run.active)
            return [run.id, *outputs]

        page.load(on_load, None, [watched_run, *run_outputs])
    return page
