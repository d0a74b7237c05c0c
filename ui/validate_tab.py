"""The Validate tab: widgets and events only. The path, its checks and its reports are
backend/service/validation_desk.py's (`board.validation`); what the tab shows is rendered by
backend/validate/tab_view.py and backend/validate/view.py (docs/validate.md, docs/page.md).

While a path runs, a timer asks the desk for its status once a second; a tick that finds
nothing new sends nothing (every output skipped). The timer runs only while a path does.
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend.i18n import translate
from backend.service import RocBoard, demo_form
from backend.validate.path import RequestError, ValidationRequest
from backend.validate.report import MAX_REPORT_BYTES, ReportError
from backend.validate.tab_view import RUNNING_STATES, refusal_markdown, report_choices, request_from_page, rung_choices, status_key, status_markdown
from backend.validate.view import comparison_markdown, report_markdown
from ui.widgets import Relabel, Texts

POLL_S = 1.0  # the status panel's refresh while a path runs


def build_validate_tab(board: RocBoard, texts: Texts, locale_state: Any) -> dict[str, Any]:
    """Builds the tab's widgets and events; returns what the page wires further by name
    (`refresh` with `refresh_inputs` / `refresh_outputs`: the tab's select event)."""
    desk = board.validation
    demo = demo_form()
    defaults = ValidationRequest()  # the command line's defaults: rungs 1-3, 2 GPUs, drill step 10
    texts.value(gr.Markdown(texts("validate.tab.intro")), "validate.tab.intro")
    with gr.Row():
        preset = texts.label(gr.Dropdown(board.preset_choices(), value=defaults.preset, label=texts("validate.tab.preset"), elem_id="validate-preset"), "validate.tab.preset")
        gpus = texts.label(gr.Number(value=defaults.gpus, precision=0, label=texts("validate.tab.gpus"), elem_id="validate-gpus"), "validate.tab.gpus")
        drill_step = texts.label(gr.Number(value=defaults.drill_step, precision=0, label=texts("validate.tab.drill_step"), elem_id="validate-drill-step"), "validate.tab.drill_step")
        tolerance = texts.label(gr.Number(value=defaults.tolerance, label=texts("validate.tab.tolerance"), elem_id="validate-tolerance"), "validate.tab.tolerance")
    with gr.Row():
        model = texts.label(gr.Textbox(value=demo["model_path"], label=texts("validate.tab.model"), max_length=4096, elem_id="validate-model", scale=2), "validate.tab.model")
        dataset_dir = texts.label(gr.Textbox(value=demo["dataset_dir"], label=texts("validate.tab.dataset_dir"), max_length=4096, elem_id="validate-dataset-dir", scale=2), "validate.tab.dataset_dir")
        dataset = texts.label(gr.Textbox(value=demo["dataset"], label=texts("validate.tab.dataset"), max_length=255, elem_id="validate-dataset"), "validate.tab.dataset")
    with gr.Row():
        rungs = texts.label(gr.CheckboxGroup(rung_choices(), value=list(defaults.rungs), label=texts("validate.tab.rungs"), elem_id="validate-rungs", scale=3), "validate.tab.rungs")
        # Rung 4 only: a Slurm run of this many nodes, one process each.
        nodes = texts.label(gr.Number(value=defaults.nodes, precision=0, label=texts("validate.tab.nodes"), elem_id="validate-nodes", scale=1), "validate.tab.nodes")
        partition = texts.label(gr.Textbox(value="", label=texts("validate.tab.partition"), max_length=64, elem_id="validate-partition", scale=1), "validate.tab.partition")
    with gr.Row():
        start = texts.value(gr.Button(texts("validate.tab.start"), variant="primary", elem_id="validate-start"), "validate.tab.start")
        # Red and usable only while a path runs.
        stop = texts.value(gr.Button(texts("validate.tab.stop"), variant="secondary", interactive=False, elem_id="validate-stop"), "validate.tab.stop")
    refusal = gr.Markdown("", elem_id="validate-refusal")
    status = gr.Markdown(texts("validate.tab.idle"), elem_id="validate-status")
    timer = gr.Timer(POLL_S, active=False)

    texts.value(gr.Markdown(texts("validate.tab.reports")), "validate.tab.reports")
    with gr.Row():
        report_box = texts.label(gr.Dropdown(choices=[], value=None, label=texts("validate.tab.report"), elem_id="validate-report", scale=2), "validate.tab.report")
        other_box = texts.label(gr.Dropdown(choices=[], value=None, label=texts("validate.tab.compare_with"), elem_id="validate-compare-with", scale=2), "validate.tab.compare_with")
        compare = texts.value(gr.Button(texts("validate.tab.compare"), elem_id="validate-compare", scale=1), "validate.tab.compare")
    with gr.Row():
        download = texts.label(gr.File(label=texts("validate.tab.download"), interactive=False, visible=False, elem_id="validate-download"), "validate.tab.download")
        upload = texts.label(gr.File(label=texts("validate.tab.upload"), file_types=[".json"], type="filepath", elem_id="validate-upload"), "validate.tab.upload")
    upload_note = gr.Markdown("", elem_id="validate-upload-note")
    comparison = gr.Markdown("", elem_id="validate-comparison")
    report_view = gr.Markdown("", elem_id="validate-report-view")

    path_id = gr.State(None)  # the path this page follows
    shown_key = gr.State("")  # what the status panel was last drawn from (status_key)
    # What the message panels show, kept as ids and values so that a language switch renders
    # them again: (message id, params) of a refusal / of the upload's answer, (old, new) ids.
    refusal_state = gr.State(None)
    upload_state = gr.State(None)
    compared_state = gr.State(None)

    def path_status(current: str | None):
        running = desk.running()
        current = running or current
        if not current:
            return None, None
        try:
            return current, desk.status(current)
        except RequestError:  # a path of an app since restarted
            return None, None

    def saved(report_id: str | None):
        if not report_id:
            return None
        try:
            return desk.report(report_id)
        except ReportError:
            return None

    # The report so far, read again only when it lacks a rung the status says ended (the
    # progress line changes every step, the report when a rung ends and is saved), for every
    # page that follows the path.
    so_far: dict[str, Any] = {"id": None, "report": None}

    def panel(status, locale: str) -> str:
        if status is None or status.done:
            return status_markdown(status, None, locale)
        ended = sum(state not in RUNNING_STATES for state in status.rungs.values())
        report = so_far["report"] if so_far["id"] == status.report_id else None
        if report is None or len(report.rungs) < ended:
            report = saved(status.report_id)
            so_far.update(id=status.report_id, report=report)
        return status_markdown(status, report, locale)

    def reports_outputs(locale: str, chosen: str | None, other: str | None, compared: Any) -> list[Any]:
        """The reports kept now: the one chosen (else the newest), the one to compare with
        (else the next older), the chosen one's page and download, the comparison asked."""
        kept = desk.reports()
        choices = report_choices(kept, locale)
        ids = [report.id for report in kept]
        chosen = chosen if chosen in ids else (ids[0] if ids else None)
        others = [value for value in ids if value != chosen]
        if other not in others:
            older = ids[ids.index(chosen) + 1 :] if chosen in ids else []
            other = older[0] if older else (others[0] if others else None)
        report = next((r for r in kept if r.id == chosen), None)
        try:
            file = str(desk.download(chosen)) if chosen else None
        except (ReportError, OSError):
            file = None
        shown = comparison_text(compared, locale) if compared and compared[0] in ids and compared[1] in ids else ""
        return [
            gr.update(choices=choices, value=chosen),
            gr.update(choices=[c for c in choices if c[1] != chosen], value=other),
            report_markdown(report, locale) if report is not None else translate("validate.tab.no_reports", locale),
            gr.update(value=file, visible=file is not None),
            shown,
        ]

    reports_widgets = [report_box, other_box, report_view, download, comparison]

    def comparison_text(compared: Any, locale: str) -> str:
        old, new = compared
        try:
            return comparison_markdown(desk.compare(old, new), locale)
        except ReportError as error:
            return refusal_markdown(error.message_id, error.params, locale, frame="validate.tab.compare_refused")

    def path_outputs(current: str | None, locale: str) -> list[Any]:
        found_id, found = path_status(current)
        return outputs_of(found_id, found, locale)

    def outputs_of(current: str | None, found: Any, locale: str) -> list[Any]:
        """The path's widgets from a status just asked (one ask per event)."""
        running = found is not None and not found.done
        return [
            current,
            status_key(found),
            panel(found, locale),
            gr.Timer(active=running),
            gr.update(interactive=not running),
            gr.update(interactive=running, variant="stop" if running else "secondary"),
        ]

    path_widgets = [path_id, shown_key, status, timer, start, stop]

    def refresh(locale: str, current: str | None, chosen: str | None, other: str | None, compared: Any):
        """A visit: the path running here (a reloaded page finds it again) and the reports kept."""
        return [*path_outputs(current, locale), *reports_outputs(locale, chosen, other, compared)]

    refresh_inputs = [locale_state, path_id, report_box, other_box, compared_state]
    refresh_outputs = [*path_widgets, *reports_widgets]

    def on_start(preset_id, model_path, folder, name, processes, drill, tol, asked, node_count, slurm_partition, locale: str):
        request = request_from_page(preset_id, model_path, folder, name, processes, drill, tol, asked, node_count, slurm_partition)
        try:
            started = desk.start(request)
        except RequestError as error:
            said = (error.message_id, dict(error.params))
            return [refusal_markdown(*said, locale), said, *[gr.skip()] * len(path_widgets)]
        return ["", None, *path_outputs(started, locale)]

    start.click(
        on_start,
        [preset, model, dataset_dir, dataset, gpus, drill_step, tolerance, rungs, nodes, partition, locale_state],
        [refusal, refusal_state, *path_widgets],
        show_progress="hidden",
        concurrency_limit=1,
        concurrency_id="validate-start",
    )

    def path_and_reports(found_id: str | None, found: Any, locale: str, chosen: str | None, other: str | None, compared: Any) -> list[Any]:
        """The path's panel, and once it has ended its report chosen below: whoever sees the end
        first (the timer, or a Stop that waited for it) shows the report, as the timer stops then."""
        outputs = outputs_of(found_id, found, locale)
        if found is not None and found.done:
            return [*outputs, *reports_outputs(locale, found.report_id or chosen, other, compared)]
        return [*outputs, *[gr.skip()] * len(reports_widgets)]

    def on_stop(current: str | None, chosen: str | None, other: str | None, compared: Any, locale: str):
        if current:
            try:
                desk.stop(current)
            except RequestError:
                pass
        found_id, found = path_status(current)
        return path_and_reports(found_id, found, locale, chosen, other, compared)

    stop.click(on_stop, [path_id, report_box, other_box, compared_state, locale_state], [*path_widgets, *reports_widgets], show_progress="hidden")

    def tick(current: str | None, key: str, chosen: str | None, other: str | None, compared: Any, locale: str):
        """Once a second while a path runs: the panel redrawn only when the path moved on; when
        it ended, the timer stops and its report is chosen below."""
        found_id, found = path_status(current)
        if status_key(found) == key and found is not None and not found.done:
            return [gr.skip()] * (len(path_widgets) + len(reports_widgets))
        return path_and_reports(found_id, found, locale, chosen, other, compared)

    timer.tick(tick, [path_id, shown_key, report_box, other_box, compared_state, locale_state], [*path_widgets, *reports_widgets], show_progress="hidden")

    def on_choose(locale: str, chosen: str | None, other: str | None, compared: Any):
        return reports_outputs(locale, chosen, other, compared)

    report_box.input(on_choose, [locale_state, report_box, other_box, compared_state], reports_widgets, show_progress="hidden")

    def on_compare(chosen: str | None, other: str | None, locale: str):
        if not chosen or not other:
            return translate("validate.tab.pick_two", locale), None
        if chosen == other:
            return translate("validate.tab.same_report", locale), None
        compared = (other, chosen)  # the one compared with is the earlier: "before"
        return comparison_text(compared, locale), compared

    compare.click(on_compare, [report_box, other_box, locale_state], [comparison, compared_state], show_progress="hidden")

    def on_upload(file_path: str | None, locale: str, other: str | None, compared: Any):
        if not file_path:
            return [gr.skip()] * (3 + len(reports_widgets))
        # An upload may be as big as the app's limit: read no more than a report may be.
        with open(file_path, "rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
        try:
            report = desk.import_report(data)
        except ReportError as error:
            said = ("validate.tab.upload_refused", error.message_id, dict(error.params))
            return [gr.update(value=None), refusal_markdown(error.message_id, error.params, locale, frame="validate.tab.upload_refused"), said, *[gr.skip()] * len(reports_widgets)]
        said = ("validate.tab.uploaded", report.id, {})
        return [gr.update(value=None), translate("validate.tab.uploaded", locale, id=report.id), said, *reports_outputs(locale, report.id, other, compared)]

    upload.upload(on_upload, [upload, locale_state, other_box, compared_state], [upload, upload_note, upload_state, *reports_widgets], show_progress="hidden")

    def upload_text(said: Any, locale: str) -> str:
        frame, message_id, params = said
        if frame == "validate.tab.uploaded":
            return translate(frame, locale, id=message_id)
        return refusal_markdown(message_id, params, locale, frame=frame)

    def relabel(locale: str, current: str | None, chosen: str | None, other: str | None, compared: Any, refused: Any, uploaded: Any):
        """A language switch: the choices, the panels and the messages in the new language."""
        return [
            gr.update(choices=board.preset_choices(locale)),
            gr.update(choices=rung_choices(locale)),
            refusal_markdown(refused[0], refused[1], locale) if refused else gr.skip(),
            upload_text(uploaded, locale) if uploaded else gr.skip(),
            *path_outputs(current, locale),
            *reports_outputs(locale, chosen, other, compared),
        ]

    return {
        "refresh": refresh,
        "refresh_inputs": refresh_inputs,
        "refresh_outputs": refresh_outputs,
        "status": status,
        "report": report_box,
        "relabel": Relabel(relabel, [path_id, report_box, other_box, compared_state, refusal_state, upload_state], [preset, rungs, refusal, upload_note, *path_widgets, *reports_widgets]),
    }
