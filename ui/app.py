"""The page: a header with the language switch, and one tab per task. Wiring only."""

from __future__ import annotations

import gradio as gr

from backend import view
from backend.i18n import pick_locale
from backend.service import RocBoard
from ui.chat_tab import CHAT_CSS, build_chat_tab
from ui.data_tab import DATA_CSS, build_data_tab
from ui.doctor_tab import DOCTOR_CSS, build_doctor_tab
from ui.evaluate_tab import EVALUATE_CSS, build_evaluate_tab
from ui.export_tab import EXPORT_CSS, build_export_tab
from ui.gradio_locale import follow_page_language
from ui.import_tab import build_import_tab
from ui.live import live_script
from ui.notify import notify_script
from ui.runs_tab import RUNS_CSS, build_runs_tab
from ui.sweep_tab import build_sweep_tab
from ui.train_tab import ACTIONS_CSS, build_train_tab
from ui.validate_tab import build_validate_tab
from ui.widgets import Texts

TRAIN_TAB_ID = "train"


def build_ui(board: RocBoard) -> gr.Blocks:
    texts = Texts()
    with gr.Blocks(
        title="RocBoard",
        css=view.PROGRESS_CSS + RUNS_CSS + ACTIONS_CSS + DATA_CSS + CHAT_CSS + EVALUATE_CSS + EXPORT_CSS + DOCTOR_CSS,
        head=live_script() + notify_script(),  # the watcher; the browser's word when a run ends (ui/notify.py)
        theme=gr.themes.Default(primary_hue="red"),
    ) as page:
        with gr.Row():
            texts.value(gr.Markdown(texts("app.header")), "app.header")
            language = gr.Radio([("English", "en"), ("中文", "zh-CN")], value="en", show_label=False, container=False, elem_id="language", scale=0, min_width=200)
        locale_state = gr.State("en")
        # The language the user picked, kept in this browser's localStorage so that a reload
        # (or a new tab) speaks it; none picked yet: the browser's Accept-Language. A fixed key
        # and secret: the choice survives a restart of the app (it is no secret).
        saved_locale = gr.BrowserState(None, storage_key="rocboard-locale", secret="rocboard-locale")
        with gr.Tabs() as tabs:
            with texts.label(gr.Tab(texts("tab.train"), id=TRAIN_TAB_ID, elem_id="tab-train"), "tab.train"):
                train = build_train_tab(board, texts, locale_state)
            with texts.label(gr.Tab(texts("tab.data"), id="data", elem_id="tab-data"), "tab.data") as data_tab:
                data = build_data_tab(board, texts, locale_state, train, tabs, TRAIN_TAB_ID)
            with texts.label(gr.Tab(texts("tab.runs"), id="runs", elem_id="tab-runs"), "tab.runs") as runs_tab:
                runs = build_runs_tab(board, texts, locale_state, train, tabs, TRAIN_TAB_ID)
                refresh_runs, runs_outputs = runs.refresh, runs.refresh_outputs
            # Try and ship a run: chat with it beside its base, evaluate it, merge and export it.
            try_tabs = {}
            for tab_id, label, build in (
                ("chat", "tab.chat", build_chat_tab),
                ("evaluate", "tab.evaluate", build_evaluate_tab),
                ("export", "tab.export", build_export_tab),
            ):
                with texts.label(gr.Tab(texts(label), id=tab_id, elem_id=f"tab-{tab_id}"), label) as tab:
                    try_tabs[tab_id] = (tab, build(board, texts, locale_state, train, tabs, TRAIN_TAB_ID))
            # Prove a setup before a long training: one GPU, N GPUs, a fault drill (docs/validate.md).
            with texts.label(gr.Tab(texts("tab.sweeps"), id="sweeps", elem_id="tab-sweeps"), "tab.sweeps") as sweeps_tab:
                sweeps = build_sweep_tab(board, texts, locale_state, train, tabs, TRAIN_TAB_ID, {tab_id: wired for tab_id, (_, wired) in try_tabs.items()})
            with texts.label(gr.Tab(texts("tab.validate"), id="validate", elem_id="tab-validate"), "tab.validate") as validate_tab:
                validate = build_validate_tab(board, texts, locale_state)
            with texts.label(gr.Tab(texts("tab.import_export"), id="import", elem_id="tab-import"), "tab.import_export"):
                import_relabel = build_import_tab(board, texts, locale_state, train, tabs, TRAIN_TAB_ID)
            with texts.label(gr.Tab(texts("tab.doctor"), id="doctor", elem_id="tab-doctor"), "tab.doctor"):
                build_doctor_tab(board, texts, locale_state, language)
        # What a page load, a tab's visit, a form change or the language switch asks is answered
        # from memory and disk in milliseconds: a plain request (queue=False), not a queued event.
        # Gradio 5's client, when queued events overlap (a load fires several), sometimes leaves
        # the /queue/data stream open after they all ended, and the server then checks that
        # stream 20 times a second for as long as the tab stays open: ~1 % of a core per tab,
        # measured (BENCHMARKS.md, section 12). Long work (Start, chat, export, ...) stays queued.
        # The table was filled when the page was built: each visit shows the runs on disk now.
        runs_tab.select(refresh_runs, locale_state, runs_outputs, show_progress="hidden", queue=False)
        # Datasets added by another tab (or the command line) are offered on each visit.
        data_tab.select(data["refresh"], None, data["registered"], show_progress="hidden", queue=False)
        # Each visit offers the runs on disk now (runs finished, made or deleted elsewhere).
        for tab, wired in try_tabs.values():
            if "refresh" in wired:
                tab.select(wired["refresh"], wired.get("refresh_inputs", locale_state), wired["refresh_outputs"], show_progress="hidden", queue=False)
        # Each visit finds the path running here (its status followed again) and the reports kept now.
        validate_tab.select(validate["refresh"], validate["refresh_inputs"], validate["refresh_outputs"], show_progress="hidden", queue=False)
        # Each visit offers the sweeps on disk now, the metrics in the page's language.
        sweeps_tab.select(sweeps["refresh"], sweeps["refresh_inputs"], sweeps["refresh_outputs"], show_progress="hidden", queue=False)
        strategy = train.fields["dist_strategy"]

        def relabel(locale: str, run_id, preset_id: str, mode: dict):
            """Every label in `locale`, and the run panel redrawn in it (the idle one too: its
            texts were written in English when the page was built)."""
            mode_line = view.form_mode_markdown(bool(mode.get("editing", True)), mode.get("run_id"), locale, draft=bool(mode.get("draft")))
            return [locale, *texts.updates(locale), board.preset_notes(preset_id, locale), mode_line, *train.render(run_id, None, locale, mode)]

        relabelled = language.change(
            relabel,
            [language, train.watched_run, train.fields["preset"], train.mode],
            [locale_state, *texts.widgets, train.preset_notes, train.mode_box, *train.run_outputs],
            queue=False,
        )
        train.then_derive(relabelled)
        # The runs table and the strategy labels are data, not static labels: redrawn too.
        language.change(refresh_runs, language, runs_outputs, show_progress="hidden", queue=False)
        language.change(lambda locale: gr.update(choices=view.strategy_choices(locale)), language, strategy, show_progress="hidden", queue=False)
        run_on = train.fields["run_on"]
        language.change(lambda locale: gr.update(choices=view.run_on_choices(locale)), language, run_on, show_progress="hidden", queue=False)
        # The tabs' own panels in the new language (the Data tab's layouts: a radio's choices, not a
        # label): on the switch, not on locale_state (ui/widgets.Relabel).
        for relabel_tab in (runs.relabel, data["relabel"], validate["relabel"], import_relabel):
            language.change(relabel_tab.fn, [language, *relabel_tab.inputs], relabel_tab.outputs, show_progress="hidden", queue=False)
        # The presets' names are their files' words, in each language (display_name_zh).
        preset = train.fields["preset"]
        language.change(lambda locale: gr.update(choices=board.preset_choices(locale)), language, preset, show_progress="hidden", queue=False)
        # Only a choice the user made is kept (`input`, not `change`: on_load sets the switch too).
        language.input(lambda locale: locale, language, saved_locale, show_progress="hidden", queue=False)

        def on_load(preset_id: str, saved: object, saved_draft: object, request: gr.Request):
            """A new tab: the language picked before in this browser, else the browser's, and
            the training run training here (or the latest) with its full charts; the form is
            the draft this browser kept, if any, else that run's settings."""
            locale = pick_locale(request.headers.get("accept-language") if request else None, saved if isinstance(saved, str) else None)
            run = board.run_to_show()
            return [
                locale,
                locale,
                *texts.updates(locale),
                board.preset_notes(preset_id, locale),
                gr.update(choices=view.strategy_choices(locale)),
                gr.update(choices=view.run_on_choices(locale)),
                gr.update(choices=board.preset_choices(locale)),
                *train.open_first(run.id if run else None, saved_draft, locale),
            ]

        loaded = page.load(
            on_load,
            [train.fields["preset"], saved_locale, train.draft],
            [locale_state, language, *texts.widgets, train.preset_notes, strategy, run_on, preset, *train.open_outputs],
            show_progress="hidden",
            queue=False,
        )
        train.then_derive(loaded)
        # Gradio's own words (the upload area's "Drop File Here", ...) in the page's language too.
        follow_page_language(language, loaded)
    return page

