"""The Chat tab: widgets and events only. What to load, what to say and what went wrong are
decided by board.chat (backend/service/chat_desk.py) and backend/chat/view.py."""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend.chat import view as chat_view
from backend.chat.server import GenerationSettings
from backend.service import RocBoard
from ui.train_tab import TrainTab
from ui.widgets import Texts, plot

CHAT_CSS = ""


def build_chat_tab(board: RocBoard, texts: Texts, locale_state: Any, train: TrainTab, tabs: Any, train_tab_id: str) -> dict[str, Any]:
    """Builds the tab's widgets and events; returns the widgets the page wires further by name
    (`refresh`: a callable for the tab's select event, `refresh_outputs`: its outputs)."""
    desk = board.chat
    texts.value(gr.Markdown(texts("chat.intro")), "chat.intro")
    with gr.Row(equal_height=True):
        run_box = texts.label(gr.Dropdown(chat_view.run_choices(desk.chattable_runs()), value=None, label=texts("chat.run"), elem_id="chat-run", scale=3), "chat.run")
        checkpoint_box = texts.label(gr.Dropdown(chat_view.checkpoint_choices([]), value="", label=texts("chat.checkpoint"), elem_id="chat-checkpoint", scale=2), "chat.checkpoint")
        side_box = texts.label(gr.Checkbox(False, label=texts("chat.side_by_side"), elem_id="chat-side-by-side", scale=2), "chat.side_by_side")
        load_button = texts.value(gr.Button(texts("chat.load"), variant="primary", elem_id="chat-load", scale=1), "chat.load")
        unload_button = texts.value(gr.Button(texts("chat.unload"), elem_id="chat-unload", scale=1), "chat.unload")
    texts.value(gr.Markdown(texts("chat.side_by_side_info")), "chat.side_by_side_info")
    status_box = gr.Markdown(chat_view.status_markdown(desk.status()), elem_id="chat-status")
    with gr.Row():
        system_box = texts.label(gr.Textbox(label=texts("chat.system"), lines=2, max_length=8000, elem_id="chat-system", scale=3), "chat.system")
        limits = GenerationSettings
        temperature = texts.label(gr.Slider(limits.MIN_TEMPERATURE, limits.MAX_TEMPERATURE, value=0.7, step=0.05, label=texts("chat.temperature"), elem_id="chat-temperature"), "chat.temperature")
        top_p = texts.label(gr.Slider(0.01, 1.0, value=0.9, step=0.01, label=texts("chat.top_p"), elem_id="chat-top-p"), "chat.top_p")
        max_new = texts.label(gr.Slider(1, limits.MAX_NEW_TOKENS, value=256, step=1, label=texts("chat.max_new_tokens"), elem_id="chat-max-new-tokens"), "chat.max_new_tokens")
    with gr.Row():
        with gr.Column():
            # User and model text is never HTML: markdown off, every message escaped
            # (backend/chat/view.py `shown`), and Gradio's sanitizer on as well.
            adapter_chat = texts.label(
                gr.Chatbot(type="messages", label=texts("chat.adapter_column"), elem_id="chat-adapter", render_markdown=False, sanitize_html=True, height=420), "chat.adapter_column"
            )
        with gr.Column(visible=False) as base_column:
            base_chat = texts.label(gr.Chatbot(type="messages", label=texts("chat.base_column"), elem_id="chat-base", render_markdown=False, sanitize_html=True, height=420), "chat.base_column")
    with gr.Row(equal_height=True):
        input_box = texts.label(gr.Textbox(label=texts("chat.input"), placeholder=texts("chat.input_placeholder"), max_length=16000, elem_id="chat-input", scale=6), "chat.input")
        send_button = texts.value(gr.Button(texts("chat.send"), variant="primary", elem_id="chat-send", scale=1), "chat.send")
        clear_button = texts.value(gr.Button(texts("chat.clear"), elem_id="chat-clear", scale=1), "chat.clear")
    # The placeholder is words too: relabelled with the rest on a language switch.
    texts.entries.append((input_box, "placeholder", "chat.input_placeholder"))
    memory_plot = gr.Plot(elem_id="chat-memory", show_label=False)
    memory_timer = gr.Timer(3.0, active=False)

    def side_visible(status) -> Any:
        return gr.update(visible=status.mode in ("side_by_side", "base") and status.state in ("loading", "ready"))

    def refresh(locale: str, wanted: str | None = None):
        """The runs on disk now; `wanted` chosen when it is one of them (a sweep's best run,
        opened from the Sweeps tab), else the run loaded, else the latest."""
        runs = desk.chattable_runs()
        choices = chat_view.run_choices(runs)
        status = desk.status()
        loaded = status.state in ("loading", "ready") and status.run_id in {run.id for run in runs}
        chosen = wanted if wanted in {run.id for run in runs} else (status.run_id if loaded else (runs[0].id if runs else None))
        return (
            gr.update(choices=choices, value=chosen),
            gr.update(choices=chat_view.checkpoint_choices(desk.checkpoints(chosen) if chosen else [], locale), value=status.checkpoint if loaded and chosen == status.run_id else ""),
            chat_view.status_markdown(status, locale) if runs or status.state != "unloaded" else chat_view.error_text("chat.no_runs", None, locale),
            side_visible(status),
            gr.update(active=status.state in ("loading", "ready")),
        )

    refresh_outputs = [run_box, checkpoint_box, status_box, base_column, memory_timer]

    def on_run(run_id: str | None, locale: str):
        return gr.update(choices=chat_view.checkpoint_choices(desk.checkpoints(run_id) if run_id else [], locale), value="")

    run_box.change(on_run, [run_box, locale_state], checkpoint_box, show_progress="hidden")

    def load(run_id: str | None, checkpoint: str | None, side: bool, locale: str):
        if not run_id:
            yield chat_view.status_markdown(desk.status(), locale), gr.update(), gr.update(active=False), [], []
            return
        status = None
        for status in desk.load(run_id, checkpoint or None, side_by_side=bool(side)):
            yield chat_view.status_markdown(status, locale), side_visible(status), gr.update(active=status.state in ("loading", "ready")), gr.update(), gr.update()
        if status is not None and status.state == "refused":
            return  # the refusal stays on the status line (not another tab's load progress), the conversations too
        yield chat_view.status_markdown(desk.status(), locale), side_visible(desk.status()), gr.update(), [], []

    load_button.click(load, [run_box, checkpoint_box, side_box, locale_state], [status_box, base_column, memory_timer, adapter_chat, base_chat], show_progress="minimal")

    def unload(locale: str):
        status = desk.unload()
        return chat_view.status_markdown(status, locale), gr.update(active=False)

    unload_button.click(unload, locale_state, [status_box, memory_timer], show_progress="hidden")

    def send(message: str, adapter_history: list, base_history: list, system: str, temp: float, top: float, tokens: float, locale: str):
        message = (message or "").strip()
        adapter_history = list(adapter_history or [])
        base_history = list(base_history or [])
        if not message:
            yield adapter_history, base_history, gr.update(), chat_view.error_text("chat.error.empty", None, locale)
            return
        status = desk.status()
        side = status.state == "ready" and status.mode == "side_by_side"
        answers = {"adapter": "", "base": ""}
        histories = {"adapter": adapter_history, "base": base_history}
        prior = {which: chat_view.history_for_model(history) for which, history in histories.items()}
        columns = ("adapter", "base") if side else ("base",) if status.mode == "base" and status.state == "ready" else ("adapter",)
        for which in columns:
            histories[which].append({"role": "user", "content": chat_view.shown(message)})
            histories[which].append({"role": "assistant", "content": ""})
        yield adapter_history, base_history, "", chat_view.status_markdown(status, locale)
        settings = GenerationSettings(temperature=temp, top_p=top, max_new_tokens=int(tokens))
        errors = []
        for event in desk.ask(message, system or "", settings, prior["adapter"], prior["base"]):
            if event.done:
                continue
            which = event.which if event.which in columns else columns[0]
            if event.error:
                text = chat_view.error_text(event.error, event.params, locale)
                errors.append(text)
                histories[which].append({"role": "assistant", "content": chat_view.shown(text), "metadata": {"title": "⚠"}})
            else:
                answers[which] += event.delta
                histories[which][-1] = {"role": "assistant", "content": chat_view.shown(answers[which])}
            yield adapter_history, base_history, gr.update(), gr.update()
        final = chat_view.status_markdown(desk.status(), locale)
        yield adapter_history, base_history, gr.update(), final + ("\n\n" + "\n".join(f"⚠ {chat_view.shown(e)}" for e in errors) if errors else "")

    send_inputs = [input_box, adapter_chat, base_chat, system_box, temperature, top_p, max_new, locale_state]
    send_outputs = [adapter_chat, base_chat, input_box, status_box]
    send_button.click(send, send_inputs, send_outputs, show_progress="hidden")
    input_box.submit(send, send_inputs, send_outputs, show_progress="hidden")
    clear_button.click(lambda: ([], []), None, [adapter_chat, base_chat], show_progress="hidden")

    def tick(locale: str):
        status = desk.status()
        active = status.state in ("loading", "ready")
        return plot(chat_view.memory_chart(desk, locale)), gr.update(active=active), (chat_view.status_markdown(status, locale) if not active else gr.update())

    memory_timer.tick(tick, locale_state, [memory_plot, memory_timer, status_box], show_progress="hidden")
    return {"refresh": refresh, "refresh_outputs": refresh_outputs, "open": lambda run_id, locale: refresh(locale, run_id), "open_inputs": [], "open_outputs": refresh_outputs}
