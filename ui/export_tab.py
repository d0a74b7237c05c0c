"""The Export tab: merge a run's adapter into its base model, write it to a folder, GGUF,
download. Widgets and events only: the rules are in backend/export/merge.py, the words in
backend/service/export_desk.py."""

from __future__ import annotations

import time
from typing import Any

import gradio as gr

from backend.export.merge import SHARD_GB_RANGE
from backend.i18n import translate
from backend.service import RocBoard
from ui.train_tab import TrainTab
from ui.widgets import Texts

EXPORT_CSS = ""
POLL_S = 1.0
# A page watches an export for at most this long; the export goes on (Refresh shows it).
WATCH_MAX_S = 6 * 3600


def device_choices(locale: str) -> list[tuple[str, str]]:
    return [(translate("export.device_cpu", locale), "cpu"), (translate("export.device_auto", locale), "auto")]


GGUF_LABELS = {"none": "export.gguf_none", "f16": "export.gguf_f16", "q8_0": "export.gguf_q8_0"}


def gguf_choices(locale: str, available: bool) -> list[tuple[str, str]]:
    names = list(GGUF_LABELS) if available else ["none"]
    return [(translate(GGUF_LABELS[name], locale), name) for name in names]


def checkpoint_choices(board: RocBoard, run_id: str | None, locale: str) -> list[tuple[str, str]]:
    return [(translate("word.final_adapter", locale), "")] + [(name, name) for name in board.exports.checkpoints(run_id)]


def build_export_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> dict[str, Any]:
    """Builds the tab's widgets and events; returns the widgets the page wires further by name
    (`refresh`: a callable for the tab's select event, `refresh_inputs` / `refresh_outputs`:
    its inputs and outputs)."""
    desk = board.exports
    locale0 = texts.locale
    # No run chosen when the page is built (that would be the newest run when the app started,
    # for every page): the tab's refresh on each visit picks the latest run there is then.
    first = None
    has_converter = desk.converter() is not None
    texts.value(gr.Markdown(texts("export.intro")), "export.intro")
    with gr.Row():
        with gr.Column(scale=2, min_width=360):
            with gr.Row():
                run_box = texts.label(gr.Dropdown(desk.runs(), value=first, label=texts("export.run"), elem_id="export-run", scale=3), "export.run")
                checkpoint_box = texts.label(
                    gr.Dropdown(checkpoint_choices(board, first, locale0), value="", label=texts("export.checkpoint"), elem_id="export-checkpoint", scale=2), "export.checkpoint"
                )
            target_box = texts.label(gr.Textbox(value=desk.default_target(first), label=texts("export.target"), elem_id="export-dir", max_length=4096), "export.target")
            with gr.Row():
                shard_box = texts.label(
                    gr.Number(value=5, minimum=SHARD_GB_RANGE[0], maximum=SHARD_GB_RANGE[1], precision=0, label=texts("export.shard_gb"), elem_id="export-shard"), "export.shard_gb"
                )
                device_box = texts.label(gr.Radio(device_choices(locale0), value="cpu", label=texts("export.device"), elem_id="export-device"), "export.device")
                gguf_box = texts.label(
                    gr.Radio(gguf_choices(locale0, has_converter), value="none", label=texts("export.gguf"), elem_id="export-gguf", interactive=has_converter), "export.gguf"
                )
            gguf_note = texts.value(gr.Markdown(texts("export.gguf_missing"), visible=not has_converter, elem_id="export-gguf-missing"), "export.gguf_missing")
            overwrite_box = texts.label(gr.Checkbox(value=False, label=texts("export.overwrite"), elem_id="export-overwrite"), "export.overwrite")
            confirm_box = texts.label(gr.Textbox(value="", label=texts("export.confirm"), elem_id="export-confirm", max_length=255), "export.confirm")
            plan_line = gr.Markdown("", elem_id="export-plan")
            with gr.Row():
                start_button = texts.value(gr.Button(texts("export.start"), variant="primary", elem_id="export-start"), "export.start")
                cancel_button = texts.value(gr.Button(texts("export.cancel"), elem_id="export-cancel"), "export.cancel")
                refresh_button = texts.value(gr.Button(texts("export.refresh"), elem_id="export-refresh"), "export.refresh")
        with gr.Column(scale=3):
            status = gr.Markdown("", elem_id="export-status")
            download = gr.File(label=texts("export.download"), visible=False, interactive=False, elem_id="export-download")
            texts.label(download, "export.download")

    inputs = [run_box, target_box, checkpoint_box, shard_box, device_box, gguf_box, overwrite_box, confirm_box]

    def plan(run_id, target, checkpoint, shard, device, gguf, overwrite, confirm, locale):
        return desk.plan_markdown(desk.request(run_id, target, checkpoint, shard, device, gguf, overwrite, confirm), locale)

    for widget in inputs:
        widget.change(plan, [*inputs, locale_state], plan_line, show_progress="hidden", trigger_mode="always_last")

    def on_run(run_id, locale):
        return gr.update(choices=checkpoint_choices(board, run_id, locale), value=""), gr.update(value=desk.default_target(run_id)), ""

    run_box.input(on_run, [run_box, locale_state], [checkpoint_box, target_box, confirm_box], show_progress="hidden")
    # A typed confirmation is for the folder it was typed for: another folder clears it.
    target_box.input(lambda: "", None, confirm_box, show_progress="hidden", queue=False)

    def shown_download():
        path = desk.download()
        return gr.update(value=str(path), visible=True) if path is not None else gr.update(value=None, visible=False)

    def on_start(run_id, target, checkpoint, shard, device, gguf, overwrite, confirm, locale):
        request = desk.request(run_id, target, checkpoint, shard, device, gguf, overwrite, confirm)
        answer = desk.start(request)
        if not answer.started:
            # The reason where the plan is (it already said so there, if it was the plan's);
            # the status only says nothing started.
            yield translate("export.not_started", locale), gr.update(value=None, visible=False), desk.refused_markdown(request, answer, locale)
            return
        yield desk.status_markdown(locale), gr.update(value=None, visible=False), gr.skip()
        watched_until = time.monotonic() + WATCH_MAX_S
        while desk.running() and time.monotonic() < watched_until:
            time.sleep(POLL_S)
            yield desk.status_markdown(locale), gr.update(), gr.skip()
        yield desk.status_markdown(locale), shown_download(), gr.skip()

    start_button.click(
        on_start, [*inputs, locale_state], [status, download, plan_line], show_progress="hidden", concurrency_limit=1, concurrency_id="export-start"
    )

    def on_cancel(locale):
        desk.cancel()
        desk.wait(20.0)
        return desk.status_markdown(locale)

    cancel_button.click(on_cancel, locale_state, status, show_progress="hidden", queue=False)

    def refresh(locale: str, run_id: str | None = None, checkpoint: str | None = None, wanted: str | None = None):
        """The runs on disk now; `wanted` chosen when it is one of them (a sweep's best run,
        opened from the Sweeps tab), else the run chosen stays while it is there, else the
        latest is chosen (its adapters and its default folder with it). The adapters' names
        in `locale`."""
        found = desk.runs()
        chosen = wanted if wanted in found else (run_id if run_id in found else (found[0] if found else None))
        adapters = checkpoint_choices(board, chosen, locale)
        kept = chosen == run_id and checkpoint in [value for _, value in adapters]
        available = desk.converter() is not None
        return [
            gr.update(choices=found, value=chosen),
            gr.update(choices=adapters, value=checkpoint if kept else ""),
            gr.update(value=desk.default_target(chosen)) if chosen != run_id else gr.skip(),
            "" if chosen != run_id else gr.skip(),  # a confirmation typed for another folder
            gr.update(choices=device_choices(locale)),
            gr.update(choices=gguf_choices(locale, available), interactive=available),
            gr.update(visible=not available),
            desk.status_markdown(locale),
            shown_download(),
        ]

    refresh_inputs = [locale_state, run_box, checkpoint_box]
    refresh_outputs = [run_box, checkpoint_box, target_box, confirm_box, device_box, gguf_box, gguf_note, status, download]
    refresh_button.click(refresh, refresh_inputs, refresh_outputs, show_progress="hidden")
    return {
        "refresh": refresh,
        "refresh_inputs": refresh_inputs,
        "refresh_outputs": refresh_outputs,
        "open": lambda wanted, locale, run_id, checkpoint: refresh(locale, run_id, checkpoint, wanted),
        "open_inputs": [run_box, checkpoint_box],
        "open_outputs": refresh_outputs,
        "run": run_box,
        "status": status,
        "download": download,
        "plan": plan_line,
    }
