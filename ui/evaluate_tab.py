"""The Evaluate tab: widgets and events only. What can be evaluated, on what, and what an
evaluation shows is decided in backend/service/evaluation_desk.py."""

from __future__ import annotations

import time
from typing import Any

import gradio as gr

from backend import view
from backend.i18n import translate
from backend.service import RocBoard
from backend.service.evaluation_desk import MAX_NEW_TOKENS_DEFAULT, MAX_SAMPLES_DEFAULT, EvaluationView
from ui.train_tab import TrainTab
from ui.widgets import Texts

EVALUATE_CSS = ""
# The prompt column no wider than the answers beside it.
COLUMN_WIDTHS = ["30%", "35%", "35%"]

POLL_S = 1.0  # the status line's refresh while an evaluation runs
WATCH_S = 1800.0  # how long one Start follows its run; after that, Refresh does


def build_evaluate_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> dict[str, Any]:
    """Builds the tab's widgets and events; returns the widgets the page wires further by name
    (`refresh`: a callable for the tab's select event, `refresh_inputs` / `refresh_outputs`:
    its inputs and outputs)."""
    desk = board.evaluations
    texts.value(gr.Markdown(texts("eval.intro")), "eval.intro")
    eval_id = gr.State(None)  # the evaluation the tab shows
    with gr.Row():
        run = texts.label(gr.Dropdown(choices=[], value=None, label=texts("eval.label.run"), elem_id="eval-run"), "eval.label.run")
        checkpoint = texts.label(gr.Dropdown(choices=[], value=None, label=texts("eval.label.checkpoint"), elem_id="eval-checkpoint"), "eval.label.checkpoint")
        dataset = texts.label(gr.Dropdown(choices=[], value=None, label=texts("eval.label.dataset"), elem_id="eval-dataset"), "eval.label.dataset")
    dataset_note = gr.Markdown("", elem_id="eval-dataset-note")
    with gr.Row():
        max_samples = texts.label(gr.Number(value=MAX_SAMPLES_DEFAULT, precision=0, label=texts("eval.label.max_samples"), elem_id="eval-max-samples"), "eval.label.max_samples")
        max_new_tokens = texts.label(gr.Number(value=MAX_NEW_TOKENS_DEFAULT, precision=0, label=texts("eval.label.max_new_tokens"), elem_id="eval-max-new-tokens"), "eval.label.max_new_tokens")
    with gr.Row():
        # Usable once there is held-out data to evaluate on (the tab's first refresh says).
        start = texts.value(gr.Button(texts("eval.button.start"), variant="primary", interactive=False, elem_id="eval-start"), "eval.button.start")
        # Red and usable only while the evaluation shown runs.
        stop = texts.value(gr.Button(texts("eval.button.stop"), variant="secondary", interactive=False, elem_id="eval-stop"), "eval.button.stop")
        open_button = texts.value(gr.Button(texts("eval.button.open"), elem_id="eval-open"), "eval.button.open")
        refresh_button = texts.value(gr.Button(texts("button.refresh"), elem_id="eval-refresh"), "button.refresh")
    findings = gr.Markdown("", elem_id="eval-findings")
    status = gr.Markdown("", elem_id="eval-status")
    scores = gr.Markdown("", elem_id="eval-scores")
    show_template = texts.label(gr.Checkbox(value=False, label=texts("eval.label.show_template"), elem_id="eval-show-template"), "eval.label.show_template")
    # Shown while there is no prediction, in place of an empty table (and its numbered headers).
    table_empty = gr.Markdown(texts("eval.table.empty"), elem_id="eval-table-empty")
    # Plain text cells ("str"): a prompt or a prediction is the user's text, never HTML.
    table = gr.Dataframe(
        value=None,
        headers=desk.table_headers(texts.locale),
        interactive=False,
        wrap=True,
        max_height=480,
        datatype=["str", "str", "str"],
        column_widths=COLUMN_WIDTHS,
        visible=False,
        elem_id="eval-table",
    )
    shown_outputs = [eval_id, status, scores, table, table_empty, stop]

    def shown(answer: EvaluationView, locale: str, with_template: bool = False) -> list[Any]:
        value = desk.table(answer, locale, bool(with_template))
        empty = desk.table_empty(answer, locale)
        return [
            answer.run_id,
            answer.status,
            answer.scores,
            gr.update(value=value, visible=value is not None),
            gr.update(value=empty, visible=bool(empty)),
            gr.update(interactive=answer.active, variant="stop" if answer.active else "secondary"),
        ]

    def choices_for(run_id: str | None, locale: str) -> list[Any]:
        checkpoints = desk.checkpoint_choices(run_id, locale)
        datasets = desk.dataset_choices(run_id, locale)
        chosen = datasets[0][1] if datasets else None
        return [
            gr.update(choices=checkpoints, value=checkpoints[0][1] if checkpoints else None),
            gr.update(choices=datasets, value=chosen),
            desk.held_out_note(run_id, chosen, locale),
            gr.update(interactive=bool(datasets)),
        ]

    choices_outputs = [checkpoint, dataset, dataset_note, start]

    def refresh(locale: str, current: str | None = None, shown_id: str | None = None, with_template: bool = False):
        runs = desk.source_choices()
        ids = [value for _, value in runs]
        chosen = current if current in ids else (ids[0] if ids else None)
        newest = None if shown_id else desk.latest()
        latest = shown_id or (newest.id if newest is not None else None)
        answer = desk.view(latest, locale)
        note = "" if runs else translate("eval.no_runs", locale)
        return [gr.update(choices=runs, value=chosen), *choices_for(chosen, locale), note, *shown(answer, locale, with_template)]

    refresh_outputs = [run, *choices_outputs, findings, *shown_outputs]
    refresh_button.click(refresh, [locale_state, run, eval_id, show_template], refresh_outputs, show_progress="hidden")
    run.input(lambda run_id, locale: choices_for(run_id, locale), [run, locale_state], choices_outputs, show_progress="hidden")
    dataset.input(lambda run_id, choice, locale: desk.held_out_note(run_id, choice, locale), [run, dataset, locale_state], dataset_note, show_progress="hidden")

    def on_show_template(current: str | None, with_template: bool, locale: str):
        answer = desk.view(current, locale)
        return gr.update(value=desk.table(answer, locale, bool(with_template)))

    show_template.input(on_show_template, [eval_id, show_template, locale_state], table, show_progress="hidden")

    def on_start(run_id, checkpoint_name, dataset_choice, samples, tokens, with_template, locale: str):
        if not run_id:
            yield [translate("eval.pick_run", locale), *[gr.skip()] * len(shown_outputs)]
            return
        result = desk.start(run_id, dataset_choice, checkpoint_name, samples, tokens)
        message = view.findings_markdown(result.findings, locale)
        if result.run is None:
            yield [message, *[gr.skip()] * len(shown_outputs)]
            return
        new_id = result.run.id
        answer = desk.view(new_id, locale)
        yield [message, *shown(answer, locale, with_template)]
        deadline = time.monotonic() + WATCH_S
        while answer.active and time.monotonic() < deadline:
            time.sleep(POLL_S)
            answer = desk.view(new_id, locale)
            yield [gr.skip(), *shown(answer, locale, with_template)]
        if answer.active:
            waiting = translate("eval.status.waiting", locale, run_id=view.code_span(new_id, 140))
            yield [gr.skip(), new_id, waiting, *[gr.skip()] * (len(shown_outputs) - 2)]

    start.click(
        on_start, [run, checkpoint, dataset, max_samples, max_new_tokens, show_template, locale_state], [findings, *shown_outputs], show_progress="hidden"
    )

    def on_stop(current: str | None, with_template: bool, locale: str):
        if current:
            desk.stop(current)
        return shown(desk.view(current, locale), locale, with_template)

    stop.click(on_stop, [eval_id, show_template, locale_state], shown_outputs, show_progress="hidden")

    def on_open(current: str | None, locale: str):
        if not current:
            return [gr.skip(), gr.skip(), *[gr.skip()] * len(train.open_outputs)]
        return ["", gr.Tabs(selected=train_tab_id), *train.open_run(current, locale)]

    open_button.click(on_open, [eval_id, locale_state], [findings, tabs, *train.open_outputs])

    # Each visit offers the runs on disk now and preselects the latest; the table keeps the
    # template toggle as it is.
    return {
        "refresh": lambda locale, with_template: refresh(locale, None, None, with_template),
        "refresh_inputs": [locale_state, show_template],
        "refresh_outputs": refresh_outputs,
        # A run opened from elsewhere (a sweep's best run): chosen here, its checkpoints and datasets offered.
        "open": lambda run_id, locale, with_template: refresh(locale, run_id, None, with_template),
        "open_inputs": [show_template],
        "open_outputs": refresh_outputs,
        "run": run,
        "table": table,
        "status": status,
    }
