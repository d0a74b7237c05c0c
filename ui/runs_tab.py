"""The Runs tab: every run on disk, open one's charts, overlay several, delete some; the
chosen runs' details; this machine's queue and Slurm's."""

from __future__ import annotations

from typing import Any, NamedTuple

import gradio as gr

from backend import view
from backend.i18n import translate
from backend.runs.history import TABLE_COLUMNS
from backend.service import RocBoard
from ui.train_tab import TrainTab
from ui.widgets import Relabel, Texts, plot

# A state, a loss or the scores never wrap ("finishe d", "已完成（第"); every other cell may, but
# only where a line may break (at a space, after a hyphen: "20261201-191907-" / "demo"),
# never inside a word; headers too ("Best eval" / "loss"), rather than being cut. Cells and
# headers in the page's font: the table's monospace needs a third more room.
_NOWRAP = [TABLE_COLUMNS.index(column) + 1 for column in ("state", "last_loss", "best_eval_loss", "scores")]
RUNS_CSS = (
    "".join(f"#runs-table td:nth-child({n}), #runs-table td:nth-child({n}) *, " for n in _NOWRAP)[:-2]
    + " { white-space: nowrap !important; }\n"
    + "#runs-table td, #runs-table td *, #runs-table th, #runs-table th * { overflow-wrap: normal !important; word-break: normal !important; font-family: var(--font) !important; }\n"
    + "#runs-table th .header-content, #runs-table th .header-content * { white-space: normal !important; text-overflow: clip !important; }\n"
    + "#runs-details table { font-size: 0.95em; }\n"
)

# Each column's share of the table (in TABLE_COLUMNS' order), measured for the longest usual
# words in either language in a 1,200-pixel window (a 960-pixel table): "finished (attempt 2)"
# and "已完成（第 2 次尝试）" on one line, a loss, "41.6 · 44.9", "59 分 59 秒"; a run id, a name,
# "Slurm job 123456" and a start time take two lines where they must.
RUNS_COLUMN_WIDTHS = ["14.6%", "9.6%", "16.9%", "12%", "6.9%", "7.5%", "10.8%", "10%", "11.7%"]


def runs_table(board: RocBoard, locale: str) -> dict[str, Any]:
    """The runs as a table whose headers are in the page's language. Each cell shows its words
    and sorts by its value (Gradio's display_value): learning rates, losses and steps as
    numbers, not as text. One update redraws headers and cells."""
    headers, shown, values = board.history_table(locale)
    if not values:
        return {"headers": headers, "data": [], "metadata": None}
    return {"headers": headers, "data": values, "metadata": {"display_value": shown, "styling": [[""] * len(headers) for _ in shown]}}


class RunsTab(NamedTuple):
    refresh: Any  # (locale) -> updates of refresh_outputs: the runs on disk now
    refresh_outputs: list[Any]
    relabel: Relabel


def build_runs_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> RunsTab:
    """Builds the tab; returns its refresh function, the components it updates, and what a
    language switch redraws."""
    refresh_button = texts.value(gr.Button(texts("button.refresh"), elem_id="runs-refresh"), "button.refresh")
    table = gr.Dataframe(value=runs_table(board, "en"), interactive=False, elem_id="runs-table", wrap=True, column_widths=RUNS_COLUMN_WIDTHS)
    chosen = texts.label(gr.Dropdown(choices=board.run_ids(), multiselect=True, label=texts("label.runs_chosen"), elem_id="runs-chosen"), "label.runs_chosen")
    with gr.Row():
        open_button = texts.value(gr.Button(texts("button.open_run"), elem_id="runs-open"), "button.open_run")
        compare_button = texts.value(gr.Button(texts("button.compare"), elem_id="runs-compare"), "button.compare")
        delete_button = texts.value(gr.Button(texts("button.delete"), variant="stop", elem_id="runs-delete"), "button.delete")
    message = gr.Markdown("", elem_id="runs-message")
    # Asked before anything is deleted: yes, or leave it.
    with gr.Row(visible=False, elem_id="runs-confirm-row") as confirm_row:
        confirm_button = texts.value(gr.Button(texts("button.confirm_delete"), variant="stop", elem_id="runs-confirm-delete"), "button.confirm_delete")
        cancel_delete_button = texts.value(gr.Button(texts("button.cancel_delete"), elem_id="runs-cancel-delete"), "button.cancel_delete")
    # Compare draws here, right under its button; shown once there is something to draw.
    overlay = texts.label(gr.Plot(label=texts("label.overlay_chart"), visible=False, elem_id="runs-overlay"), "label.overlay_chart")
    details = gr.Markdown("", elem_id="runs-details")
    # This machine's queue (in the order the runs start; its buttons only while a run waits in
    # it), then Slurm's (only where Slurm is set up here or a run used it).
    # Side by side (more than one GPU or CPU slot): the node, each GPU and who holds it, and
    # why each queued run waits; refreshed every 3 s while it shows, sending nothing while unchanged.
    node_text = board.node_markdown("en")
    node_box = gr.Markdown(node_text or "", visible=node_text is not None, elem_id="runs-node")
    node_shown = gr.State(node_text or "")  # what this page shows now: a tick equal to it sends nothing
    # Its refresh: a hidden button that ui/live.js presses every 3 s (NODE_TICK_MS) while the panel
    # shows (its tab chosen, the browser tab in front). Not a gr.Timer: Gradio's timer ticks on
    # a tab not chosen too (it only skips while the browser tab is hidden), which with 8 runs
    # live was a node_markdown and a Gradio event every 3 s for a panel nobody saw.
    node_tick = gr.Button("", elem_id="runs-node-tick", elem_classes=["rb-hidden"])
    queue_box = gr.Markdown(elem_id="queue")
    with gr.Row(visible=False, elem_id="queue-controls") as queue_controls:
        queue_pick = texts.label(gr.Dropdown(choices=[], value=None, label=texts("queue.pick"), elem_id="queue-pick"), "queue.pick")
        up_button = texts.value(gr.Button(texts("button.queue_up"), elem_id="queue-up", min_width=80), "button.queue_up")
        down_button = texts.value(gr.Button(texts("button.queue_down"), elem_id="queue-down", min_width=80), "button.queue_down")
        cancel_button = texts.value(gr.Button(texts("button.queue_cancel"), variant="stop", elem_id="queue-cancel", min_width=160), "button.queue_cancel")
    queue_message = gr.Markdown("", elem_id="queue-message")
    slurm_box = gr.Markdown(visible=False, elem_id="queue-slurm")

    def queue_updates(locale: str, picked: str | None = None) -> list[Any]:
        queues = board.queue_view(locale)
        return [
            queues.local,
            gr.update(visible=bool(queues.queued)),
            gr.update(choices=queues.queued, value=picked if picked in queues.queued else None),
            gr.update(value=queues.slurm, visible=queues.slurm_shown),
        ]

    queue_outputs = [queue_box, queue_controls, queue_pick, slurm_box]

    def node_update(locale: str) -> tuple[Any, str]:
        text = board.node_markdown(locale)
        return gr.update(value=text or "", visible=text is not None), text or ""

    def refresh(locale: str):
        return [runs_table(board, locale), gr.update(choices=board.run_ids()), *queue_updates(locale), *node_update(locale)]

    refresh_button.click(refresh, locale_state, [table, chosen, *queue_outputs, node_box, node_shown])

    def on_node_tick(locale: str, shown: str):
        text = board.node_markdown(locale)
        if text is None or text == shown:
            return gr.skip(), gr.skip()
        return gr.update(value=text, visible=True), text

    # Not through Gradio's queue (a join and an event stream per tick): a plain request, as the
    # Train tab's watcher sends its events; it only reads (bench_node, BENCHMARKS.md section 12).
    node_tick.click(on_node_tick, [locale_state, node_shown], [node_box, node_shown], show_progress="hidden", queue=False)

    def on_move(offset: int):
        def move(run_id: str | None, locale: str):
            if not run_id:
                return [translate("runs.pick_one", locale), *[gr.skip()] * len(queue_outputs)]
            moved = board.move_queued(run_id, offset)
            return [translate("queue.moved" if moved else "queue.not_moved", locale), *queue_updates(locale, run_id)]

        return move

    up_button.click(on_move(-1), [queue_pick, locale_state], [queue_message, *queue_outputs])
    down_button.click(on_move(+1), [queue_pick, locale_state], [queue_message, *queue_outputs])

    def on_cancel(run_id: str | None, locale: str):
        if not run_id:
            return [translate("runs.pick_one", locale), *[gr.skip()] * len(queue_outputs), gr.skip()]
        refusals = board.cancel_queued(run_id)
        text = view.findings_markdown(refusals, locale) if refusals else translate("queue.cancelled", locale)
        return [text, *queue_updates(locale), runs_table(board, locale)]

    cancel_button.click(on_cancel, [queue_pick, locale_state], [queue_message, *queue_outputs, table])

    def on_open(run_ids: list[str] | None, locale: str):
        if not run_ids:
            return [translate("runs.pick_one", locale), gr.skip(), *[gr.skip()] * len(train.open_outputs)]
        return ["", gr.Tabs(selected=train_tab_id), *train.open_run(run_ids[0], locale)]

    open_button.click(on_open, [chosen, locale_state], [message, tabs, *train.open_outputs])

    def on_compare(run_ids: list[str] | None, locale: str):
        if not run_ids:
            return gr.skip(), translate("runs.pick_one", locale)
        return gr.update(value=plot(board.overlay_figure(run_ids, locale)), visible=True), ""

    compare_button.click(on_compare, [chosen, locale_state], [overlay, message])

    def on_chosen(run_ids: list[str] | None, locale: str):
        return board.run_details(list(run_ids or []), locale)

    chosen.change(on_chosen, [chosen, locale_state], details, show_progress="hidden")

    def relabel(locale: str, run_ids: list[str] | None):
        """A language switch (wired by ui/app.py on the switch itself): the details in it."""
        return on_chosen(run_ids, locale)

    def on_row(run_ids: list[str] | None, event: gr.SelectData):
        """A row clicked in the table: its run is chosen too (its details open)."""
        row = event.row_value if isinstance(event.row_value, list) else None
        run_id = str(row[0]) if row else ""
        if not run_id or run_id not in board.run_ids():
            return gr.skip()
        return [*(run_ids or []), run_id] if run_id not in (run_ids or []) else gr.skip()

    table.select(on_row, chosen, chosen, show_progress="hidden", queue=False)

    def on_delete(run_ids: list[str] | None, locale: str):
        if not run_ids:
            return gr.update(visible=False), translate("runs.pick_one", locale)
        return gr.update(visible=True), view.delete_confirm_markdown(list(run_ids), locale)

    delete_button.click(on_delete, [chosen, locale_state], [confirm_row, message])

    def on_confirm(run_ids: list[str] | None, locale: str):
        refusals = board.delete_runs(run_ids or [])
        text = view.findings_markdown(refusals, locale) if refusals else translate("runs.deleted", locale)
        return gr.update(visible=False), text, runs_table(board, locale), gr.update(choices=board.run_ids(), value=[])

    confirm_button.click(on_confirm, [chosen, locale_state], [confirm_row, message, table, chosen])
    cancel_delete_button.click(lambda locale: (gr.update(visible=False), translate("runs.delete_cancelled", locale)), locale_state, [confirm_row, message])
    return RunsTab(refresh, [table, chosen, *queue_outputs, node_box, node_shown], Relabel(relabel, [chosen], [details]))
