"""The Sweeps tab: widgets and events only. A sweep is the Train form as it stands with up to
three of its fields varied (or N seeds); `board.sweeps` (backend/sweep/desk.py) plans it (the
run count and cost, before anything starts), makes it (every run through the page's Start,
or none), ranks it; backend/sweep/page.py renders what the tab shows (docs/sweeps.md)."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend.service import RocBoard
from backend.sweep.page import added_axes, metric_choices, not_found, pick_first, plan_markdown, refusal_markdown, spec_from_page, view_markdown
from backend.sweep.record import SweepNotFound
from backend.sweep.spec import MAX_FIELDS, SweepRefused
from backend.sweep.view import DEFAULT_METRIC
from ui.train_tab import ALL_FIELDS
from ui.widgets import Texts, plot


def build_sweep_tab(board: RocBoard, texts: Texts, locale_state: Any, train: Any, tabs: Any, train_tab_id: str, try_tabs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Builds the tab; returns what the page wires further by name (`refresh`, `refresh_inputs`,
    `refresh_outputs`: the tab's select event). `try_tabs`: tab id -> what the Chat, Evaluate
    and Export tabs return (`open`, `open_inputs`, `open_outputs`: a run chosen there)."""
    desk = board.sweeps
    form_inputs = [train.fields[name] for name in ALL_FIELDS]
    texts.value(gr.Markdown(texts("sweep.tab.intro")), "sweep.tab.intro")
    with gr.Row():
        vary = [
            texts.label(gr.Textbox("", label=texts("sweep.tab.vary"), placeholder="learning_rate=1e-4,2e-4", max_length=2048, elem_id=f"sweep-vary-{index}"), "sweep.tab.vary")
            for index in range(MAX_FIELDS)
        ]
    with gr.Row():
        seeds = texts.label(gr.Textbox("", label=texts("sweep.tab.seeds"), max_length=16, elem_id="sweep-seeds"), "sweep.tab.seeds")
        metric = texts.label(gr.Dropdown(metric_choices("en"), value=DEFAULT_METRIC, label=texts("sweep.tab.metric"), elem_id="sweep-metric"), "sweep.tab.metric")
    with gr.Row():
        plan_button = texts.value(gr.Button(texts("sweep.tab.plan_button"), elem_id="sweep-plan"), "sweep.tab.plan_button")
        start_button = texts.value(gr.Button(texts("sweep.tab.start"), variant="primary", elem_id="sweep-start"), "sweep.tab.start")
    plan_box = gr.Markdown("", elem_id="sweep-plan-box")

    texts.value(gr.Markdown(texts("sweep.tab.view")), "sweep.tab.view")
    with gr.Row():
        pick = texts.label(gr.Dropdown(choices=desk.sweeps(), value=None, label=texts("sweep.tab.pick"), elem_id="sweep-pick", scale=3), "sweep.tab.pick")
        refresh_button = texts.value(gr.Button(texts("sweep.tab.refresh"), elem_id="sweep-refresh", scale=1), "sweep.tab.refresh")
    table = gr.Markdown("", elem_id="sweep-table")
    overlay = gr.Plot(elem_id="sweep-overlay", show_label=False)
    best = gr.State("")
    with gr.Row():
        open_best = texts.value(gr.Button(texts("sweep.tab.open_best"), variant="primary", elem_id="sweep-open-best"), "sweep.tab.open_best")
        cancel_rest = texts.value(gr.Button(texts("sweep.tab.cancel_rest"), elem_id="sweep-cancel-rest"), "sweep.tab.cancel_rest")
        stop_all = texts.value(gr.Button(texts("sweep.tab.stop_all"), variant="stop", elem_id="sweep-stop-all"), "sweep.tab.stop_all")
    with gr.Row():
        open_labels = {"chat": "sweep.tab.open_chat", "evaluate": "sweep.tab.open_evaluate", "export": "sweep.tab.open_export"}
        open_buttons = {tab_id: texts.value(gr.Button(texts(key), elem_id=f"sweep-open-{tab_id}"), key) for tab_id, key in open_labels.items()}
    with gr.Row():
        add_box = texts.label(gr.Textbox("", label=texts("sweep.tab.add"), placeholder="lora_rank=32", max_length=2048, elem_id="sweep-add", scale=3), "sweep.tab.add")
        add_plan_button = texts.value(gr.Button(texts("sweep.tab.add_plan"), elem_id="sweep-add-plan", scale=1), "sweep.tab.add_plan")
        add_button = texts.value(gr.Button(texts("sweep.tab.add_start"), elem_id="sweep-add-start", scale=1), "sweep.tab.add_start")
    add_plan_box = gr.Markdown("", elem_id="sweep-add-plan-box")

    def form_of(values: tuple) -> dict[str, Any]:
        return dict(zip(ALL_FIELDS, values, strict=True))

    def on_plan(locale: str, seeds_text: str, *values: Any) -> str:
        lines, form = values[:MAX_FIELDS], form_of(values[MAX_FIELDS:])
        try:
            return plan_markdown(desk.plan(spec_from_page(lines, seeds_text), form), locale)
        except SweepRefused as refused:
            return refusal_markdown(refused, locale)

    def show(sweep_id: str | None, metric_name: str, locale: str):
        if not sweep_id:
            return "", None, ""
        try:
            shown = desk.view(sweep_id, metric_name or "", locale)
        except (SweepRefused, LookupError):
            return "", None, ""
        return view_markdown(shown, locale), plot(shown.overlay), shown.best_run_id

    def on_start(locale: str, metric_name: str, seeds_text: str, *values: Any):
        lines, form = values[:MAX_FIELDS], form_of(values[MAX_FIELDS:])
        try:
            record = desk.create(spec_from_page(lines, seeds_text), form, metric=metric_name or DEFAULT_METRIC)
        except SweepRefused as refused:
            return refusal_markdown(refused, locale), gr.update(), "", None, ""
        text, figure, best_id = show(record.id, metric_name, locale)
        return "", gr.update(choices=desk.sweeps(), value=record.id), text, figure, best_id

    view_outputs = [table, overlay, best]
    plan_button.click(on_plan, [locale_state, seeds, *vary, *form_inputs], plan_box)
    start_button.click(on_start, [locale_state, metric, seeds, *vary, *form_inputs], [plan_box, pick, *view_outputs], concurrency_limit=1)
    pick.input(show, [pick, metric, locale_state], view_outputs, show_progress="hidden")
    metric.input(show, [pick, metric, locale_state], view_outputs, show_progress="hidden")
    refresh_button.click(show, [pick, metric, locale_state], view_outputs, show_progress="hidden")

    def on_cancel(sweep_id: str | None, metric_name: str, locale: str):
        if sweep_id:
            desk.cancel_rest(sweep_id)
        return show(sweep_id, metric_name, locale)

    def on_stop(sweep_id: str | None, metric_name: str, locale: str):
        if sweep_id:
            desk.stop_all(sweep_id)
        return show(sweep_id, metric_name, locale)

    cancel_rest.click(on_cancel, [pick, metric, locale_state], view_outputs)
    stop_all.click(on_stop, [pick, metric, locale_state], view_outputs)

    def on_open(best_id: str, locale: str):
        # The Train tab shows the best run (read-only); the buttons below open it on Chat, Evaluate, Export.
        if not best_id:
            return [gr.update(), *(gr.update() for _ in train.open_outputs)]
        return [gr.Tabs(selected=train_tab_id), *train.open_run(best_id, locale)]

    open_best.click(on_open, [best, locale_state], [tabs, *train.open_outputs])

    def opener(tab_id: str, wired: dict[str, Any]):
        # The best run chosen on that tab, as its own refresh chooses a run (with its checkpoints).
        def on_open_there(best_id: str, locale: str, *extra: Any):
            if not best_id:
                return [gr.update(), *(gr.update() for _ in wired["open_outputs"])]
            return [gr.Tabs(selected=tab_id), *wired["open"](best_id, locale, *extra)]

        return on_open_there

    for tab_id, button in open_buttons.items():
        wired = try_tabs[tab_id]
        button.click(opener(tab_id, wired), [best, locale_state, *wired["open_inputs"]], [tabs, *wired["open_outputs"]], show_progress="hidden")

    def on_add_plan(sweep_id: str | None, text: str, locale: str) -> str:
        try:
            if not sweep_id:
                raise pick_first()
            return plan_markdown(desk.plan_added(sweep_id, added_axes(text)), locale)
        except SweepNotFound:
            return refusal_markdown(not_found(sweep_id), locale)
        except SweepRefused as refused:
            return refusal_markdown(refused, locale)

    def on_add(sweep_id: str | None, text: str, metric_name: str, locale: str):
        try:
            if not sweep_id:
                raise pick_first()
            desk.add_runs(sweep_id, added_axes(text))
        except SweepNotFound:
            return refusal_markdown(not_found(sweep_id), locale), *show(None, metric_name, locale)
        except SweepRefused as refused:
            return refusal_markdown(refused, locale), *show(sweep_id, metric_name, locale)
        return "", *show(sweep_id, metric_name, locale)

    add_plan_button.click(on_add_plan, [pick, add_box, locale_state], add_plan_box)
    add_button.click(on_add, [pick, add_box, metric, locale_state], [add_plan_box, *view_outputs], concurrency_limit=1)

    def refresh(locale: str):
        return gr.update(choices=desk.sweeps()), gr.update(choices=metric_choices(locale))

    return {"refresh": refresh, "refresh_inputs": locale_state, "refresh_outputs": [pick, metric]}


__all__ = ["build_sweep_tab"]
