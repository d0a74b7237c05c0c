"""The Runs tab: every run on disk, open one's charts, overlay several, delete one."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend import view
from backend.i18n import translate
from backend.runs.history import HISTORY_COLUMNS
from backend.service import RocBoard
from ui.train_tab import TrainTab
from ui.widgets import Texts, plot


# The state column never wraps ("finishe d"), nor do the numbers; the table scrolls sideways.
_NOWRAP = [HISTORY_COLUMNS.index(column) + 1 for column in ("kind", "state", "where", "learning_rate", "length", "steps", "last_loss", "best_eval_loss", "scores", "duration", "started")]
RUNS_CSS = "".join(f"#runs-table td:nth-child({n}), #runs-table td:nth-child({n}) *, " for n in _NOWRAP)[:-2] + " { white-space: nowrap !important; overflow-wrap: normal !important; word-break: normal !important; }\n"


# Room for each column's longest usual value (a run id, "finished", "100 / 100", a start
# time): Gradio otherwise gives every column the same share and cuts what overflows.
RUNS_COLUMN_WIDTHS = ["145px", "75px", "100px", "85px", "105px", "75px", "70px", "100px", "88px", "120px", "105px", "75px", "75px", "115px", "65px", "150px"]


def runs_table(board: RocBoard, locale: str) -> dict[str, Any]:
    """The runs as a table whose headers are in the page's language. Each cell shows its words
    and sorts by its value (Gradio's display_value): learning rates, losses and steps as
    numbers, not as text. One update redraws headers and cells."""
    headers, shown, values = board.history_table(locale)
    if not values:
        return {"headers": headers, "data": [], "metadata": None}
    return {"headers": headers, "data": values, "metadata": {"display_value": shown, "styling": [[""] * len(headers) for _ in shown]}}


def build_runs_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> tuple[Any, list[Any]]:
    """Builds the tab; returns its refresh function and the components it updates."""
    refresh_button = texts.value(gr.Button(texts("button.refresh"), elem_id="runs-refresh"), "button.refresh")
    table = gr.Dataframe(value=runs_table(board, "en"), interactive=False, elem_id="runs-table", wrap=True, column_widths=RUNS_COLUMN_WIDTHS)
    chosen = texts.label(gr.Dropdown(choices=board.run_ids(), multiselect=True, label=texts("label.runs_chosen"), elem_id="runs-chosen"), "label.runs_chosen")
    with gr.Row():
        open_button = texts.value(gr.Button(texts("button.open_run"), elem_id="runs-open"), "button.open_run")
        compare_button = texts.value(gr.Button(texts("button.compare"), elem_id="runs-compare"), "button.compare")
        delete_button = texts.value(gr.Button(texts("button.delete"), variant="stop", elem_id="runs-delete"), "button.delete")
        confirm_button = texts.value(gr.Button(texts("button.confirm_delete"), variant="stop", visible=False, elem_id="runs-confirm-delete"), "button.confirm_delete")
    message = gr.Markdown("", elem_id="runs-message")
    # The queue: this machine's (in the order the runs start) and the Slurm jobs that wait or run.
    queue_box = gr.Markdown(board.queue_markdown("en"), elem_id="queue")
    with gr.Row():
        queue_pick = texts.label(gr.Dropdown(choices=queue_choices(board), value=None, label=texts("queue.pick"), elem_id="queue-pick"), "queue.pick")
        up_button = texts.value(gr.Button(texts("button.queue_up"), elem_id="queue-up", min_width=80), "button.queue_up")
        down_button = texts.value(gr.Button(texts("button.queue_down"), elem_id="queue-down", min_width=80), "button.queue_down")
        cancel_button = texts.value(gr.Button(texts("button.queue_cancel"), variant="stop", elem_id="queue-cancel", min_width=160), "button.queue_cancel")
    queue_message = gr.Markdown("", elem_id="queue-message")
    overlay = texts.label(gr.Plot(label=texts("label.overlay_chart"), elem_id="runs-overlay"), "label.overlay_chart")

    def refresh(locale: str):
        return runs_table(board, locale), gr.update(choices=board.run_ids()), board.queue_markdown(locale), gr.update(choices=queue_choices(board))

    refresh_button.click(refresh, locale_state, [table, chosen, queue_box, queue_pick])

    def on_move(offset: int):
        def move(run_id: str | None, locale: str):
            if not run_id:
                return translate("runs.pick_one", locale), gr.skip(), gr.skip()
            moved = board.move_queued(run_id, offset)
            return translate("queue.moved" if moved else "queue.not_moved", locale), board.queue_markdown(locale), gr.update(choices=queue_choices(board), value=run_id)

        return move

    up_button.click(on_move(-1), [queue_pick, locale_state], [queue_message, queue_box, queue_pick])
    down_button.click(on_move(+1), [queue_pick, locale_state], [queue_message, queue_box, queue_pick])

    def on_cancel(run_id: str | None, locale: str):
        if not run_id:
            return translate("runs.pick_one", locale), gr.skip(), gr.skip(), gr.skip()
        refusals = board.cancel_queued(run_id)
        text = view.findings_markdown(refusals, locale) if refusals else translate("queue.cancelled", locale)
        return text, board.queue_markdown(locale), gr.update(choices=queue_choices(board), value=None), runs_table(board, locale)

    cancel_button.click(on_cancel, [queue_pick, locale_state], [queue_message, queue_box, queue_pick, table])

    def on_open(run_ids: list[str] | None, locale: str):
        if not run_ids:
            return [translate("runs.pick_one", locale), gr.skip(), *[gr.skip()] * len(train.open_outputs)]
        return ["", gr.Tabs(selected=train_tab_id), *train.open_run(run_ids[0], locale)]

    open_button.click(on_open, [chosen, locale_state], [message, tabs, *train.open_outputs])

    def on_compare(run_ids: list[str] | None, locale: str):
        if not run_ids:
            return gr.skip(), translate("runs.pick_one", locale)
        return plot(board.overlay_figure(run_ids, locale)), ""

    compare_button.click(on_compare, [chosen, locale_state], [overlay, message])

    def on_delete(run_ids: list[str] | None, locale: str):
        if not run_ids:
            return gr.update(visible=False), translate("runs.pick_one", locale)
        return gr.update(visible=True), translate("runs.confirm_delete", locale, runs=", ".join(run_ids))

    delete_button.click(on_delete, [chosen, locale_state], [confirm_button, message])

    def on_confirm(run_ids: list[str] | None, locale: str):
        refusals = board.delete_runs(run_ids or [])
        text = view.findings_markdown(refusals, locale) if refusals else translate("runs.deleted", locale)
        return gr.update(visible=False), text, runs_table(board, locale), gr.update(choices=board.run_ids(), value=[])

    confirm_button.click(on_confirm, [chosen, locale_state], [confirm_button, message, table, chosen])
    return refresh, [table, chosen, queue_box, queue_pick]


def queue_choices(board: RocBoard) -> list[str]:
    """The queued runs, the next to start first: what the queue's buttons act on."""
    return [state.id for state in board.queued_runs()]
