"""The Chat tab in headless Chromium, on real LLaMA-Factory servers: train the demo run from
the Train tab and chat with it; the fine-tuned model and its base side by side; a clear
message while nothing is loaded or while loading; user text never becomes HTML; the Chinese
page; and the app stopped leaves no chat server running.

One app server for the module, its runs dir seeded with a copy of the session's trained
demo run. Every word is looked up with `translate()`."""

from __future__ import annotations

import psutil
import pytest

from backend.chat.server import WORKER_MARK
from backend.i18n import translate
from tests.harness import AppServer, copy_run, wait_until
from tests.test_browser_app import RUN_TIMEOUT_S, UI_TIMEOUT_MS, fill, run_ids, shoot, text_of, wait_for_new_run, wait_for_text, wait_until_idle
from tests.test_browser_zh import english_in, english_words, stray_english, visible_text

pytestmark = pytest.mark.browser

LOAD_TIMEOUT_MS = 180_000
ANSWER_TIMEOUT_MS = 60_000


def chat_servers(app_server) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if WORKER_MARK in " ".join(process.info.get("cmdline") or []):
            try:
                if str(process.cwd()).startswith(str(app_server.runs_dir)):
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    return found


@pytest.fixture(scope="module")
def app_server(demo_assets, trained_demo_run, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("chat-app")
    source_runs, run_id = trained_demo_run
    # The run's adapter zip may still be being written (a temp file that is renamed): copy after.
    wait_until(lambda: not list((source_runs / run_id).glob(".*.tmp")), 60, what="the run's files to settle")
    copy_run(source_runs, run_id, workdir / "runs")
    server = AppServer(workdir=workdir).start()
    try:
        yield server
    finally:
        server.stop()
        for process in chat_servers(server):
            process.kill()


def open_chat(page) -> None:
    page.locator("#tab-chat-button, button[role=tab]:has-text('{}')".format(translate("tab.chat", "en"))).first.click()
    page.wait_for_selector("#chat-load", timeout=UI_TIMEOUT_MS)
    # The tab's select event offers the runs on disk and shows the status: wait for it, or
    # its answer lands after (and over) what the test does next.
    page.wait_for_function("() => (document.querySelector('#chat-run input')?.value || '').length > 0", timeout=UI_TIMEOUT_MS, polling=200)
    wait_until_idle(page)


def pick(page, element_id: str, option: str) -> None:
    page.locator(f"#{element_id} input").first.click()
    page.get_by_role("option", name=option).first.click()


def load(page, side_by_side: bool = False) -> str:
    box = page.locator("#chat-side-by-side input")
    if box.is_checked() != side_by_side:
        box.click()
    page.locator("#chat-load").click()
    # The status may still say Ready from a load before: first the new load's own words.
    wait_for_text(page, "#chat-status", "Loading", translate("chat.status.refused", "en"))
    return wait_for_text(page, "#chat-status", "Ready", translate("chat.status.failed", "en"), translate("chat.status.refused", "en"), timeout_ms=LOAD_TIMEOUT_MS)


def greedy(page) -> None:
    slider = page.locator("#chat-temperature input[type=number]")
    slider.fill("0")
    slider.press("Enter")


def bot_texts(page, column: str) -> list[str]:
    return page.evaluate("(sel) => [...document.querySelectorAll(sel + ' [data-testid=bot]')].map(e => e.innerText.trim())", f"#{column}")


def send(page, text: str) -> None:
    fill(page, "chat-input", text)
    page.locator("#chat-send").click()


def wait_for_answer(page, column: str, count: int) -> str:
    page.wait_for_function(
        "([sel, n]) => { const b = [...document.querySelectorAll(sel + ' [data-testid=bot]')]; return b.length >= n && b[n-1].innerText.trim().length > 0; }",
        arg=[f"#{column}", count],
        timeout=ANSWER_TIMEOUT_MS,
        polling=100,
    )
    wait_until_idle(page)
    return bot_texts(page, column)[count - 1]


# Records each length the base column's last answer is seen at while it grows.
GROWTH_JS = """() => {
  window.__chat_lengths = [];
  const box = document.querySelector('#chat-base');
  const note = () => {
    const bots = box.querySelectorAll('[data-testid=bot]');
    const n = bots.length ? bots[bots.length - 1].innerText.trim().length : 0;
    const l = window.__chat_lengths;
    if (bots.length >= 2 && n > 0 && l[l.length - 1] !== n) l.push(n);
  };
  new MutationObserver(note).observe(box, {subtree: true, childList: true, characterData: true});
}"""


def test_a_chat_without_a_model_says_so_clearly(app_server, page_of) -> None:
    page = page_of(editable=False)
    open_chat(page)
    page.locator("#chat-unload").click()
    wait_for_text(page, "#chat-status", translate("chat.status.unloaded", "en"))
    send(page, "hello?")
    wait_for_text(page, "#chat-status", translate("chat.error.not_loaded", "en"))
    assert translate("chat.error.not_loaded", "en") in " ".join(bot_texts(page, "chat-adapter"))
    # While loading: the question is answered with "still loading", not lost in silence.
    page.locator("#chat-load").click()
    wait_for_text(page, "#chat-status", "Loading")
    send(page, "are you there?")
    wait_for_text(page, "#chat-status", translate("chat.error.loading", "en"), "Ready")
    texts = " ".join(bot_texts(page, "chat-adapter"))
    assert translate("chat.error.loading", "en") in texts or "Ready" in text_of(page, "#chat-status")
    wait_for_text(page, "#chat-status", "Ready", timeout_ms=LOAD_TIMEOUT_MS)


def test_train_in_the_page_then_chat_answers(app_server, page_of) -> None:
    page = page_of(editable=True)
    before = run_ids(app_server)
    fill(page, "run-name", "chat-demo")
    wait_until_idle(page)
    loaded_before = chat_servers(app_server)
    page.locator("#start").click()
    run_id = wait_for_new_run(app_server, before)["id"]
    if loaded_before:  # a model the test before loaded: the trainer needs the GPU, chat lets go
        wait_until(lambda: chat_servers(app_server) == [], 30, what="the chat servers to stop for the trainer")
    status = wait_for_text(page, "#status", "Status: finished", "Status: failed", "Status: stopped", timeout_ms=RUN_TIMEOUT_S * 1000)
    assert "Status: finished" in status, status
    open_chat(page)
    # The newest finished run is offered first.
    page.wait_for_function("(id) => (document.querySelector('#chat-run input')?.value || '').includes(id)", arg=run_id, timeout=UI_TIMEOUT_MS)
    assert "Ready" in load(page), text_of(page, "#chat-status")
    assert run_id in text_of(page, "#chat-status")
    greedy(page)
    send(page, "What is the capital of France?")
    answer = wait_for_answer(page, "chat-adapter", 1)
    assert answer
    assert page.locator("#chat-memory").count() == 1
    shoot(page, "chat-answer")


def test_side_by_side_shows_two_different_answers(app_server, page_of) -> None:
    page = page_of(editable=False)
    open_chat(page)
    assert "Ready" in load(page, side_by_side=True), text_of(page, "#chat-status")
    assert page.locator("#chat-base").is_visible()
    page.locator("#chat-clear").click()
    greedy(page)
    send(page, "What is the capital of France?")
    adapter = wait_for_answer(page, "chat-adapter", 1)
    base = wait_for_answer(page, "chat-base", 1)
    assert adapter and base and adapter != base
    assert len(chat_servers(app_server)) == 2
    # The app's sampler is lent to the chat server: its memory is drawn, growing from 0.
    page.wait_for_function(
        "() => { const p = document.querySelector('#chat-memory .js-plotly-plot'); return !!p && (p.data || []).some(t => (t.y || []).filter(v => v > 0).length >= 2); }",
        timeout=UI_TIMEOUT_MS,
        polling=500,
    )
    shoot(page, "chat-side-by-side")
    # Streamed into the page: the random-weight base model, greedy, repeats itself until max
    # new tokens (it never says its end token), and its answer is seen growing, not arriving
    # in one piece.
    page.evaluate(GROWTH_JS)
    tokens = page.locator("#chat-max-new-tokens input[type=number]")
    tokens.fill("1500")
    tokens.press("Enter")
    send(page, "Tell me a long story.")
    wait_for_answer(page, "chat-base", 2)
    page.wait_for_function("() => new Set(window.__chat_lengths).size >= 3", timeout=ANSWER_TIMEOUT_MS, polling=200)
    lengths = page.evaluate("() => window.__chat_lengths")
    assert len(set(lengths)) >= 3, lengths  # seen at three or more lengths while it grew


def test_user_text_is_never_html(app_server, page_of) -> None:
    page = page_of(editable=False)
    open_chat(page)
    if "Ready" not in text_of(page, "#chat-status"):
        load(page)
    hostile = '<img src=x onerror="window.__chat_xss=1"><b id=chat-bold>bold</b>'
    send(page, hostile)
    page.wait_for_function("(t) => document.querySelector('#chat-adapter').innerText.includes('onerror')", arg="x", timeout=ANSWER_TIMEOUT_MS)
    wait_until_idle(page)
    assert page.locator("#chat-adapter img").count() == 0
    assert page.locator("#chat-bold").count() == 0
    assert page.evaluate("() => window.__chat_xss") is None
    assert hostile in page.locator("#chat-adapter").inner_text()  # shown exactly as typed


def test_the_chinese_page_labels_the_tab(app_server, page_of) -> None:
    page = page_of("zh-CN", editable=False)
    # The page speaks Chinese once its load event has run: the tab's texts follow from there.
    page.wait_for_function("(text) => document.querySelector('#start').innerText.trim() === text", arg=translate("button.start", "zh-CN"), timeout=UI_TIMEOUT_MS)
    page.locator("button[role=tab]:has-text('{}')".format(translate("tab.chat", "zh-CN"))).first.click()
    page.wait_for_selector("#chat-load", timeout=UI_TIMEOUT_MS)
    page.wait_for_function("(t) => document.querySelector('#chat-load').innerText.trim() === t", arg=translate("chat.load", "zh-CN"), timeout=UI_TIMEOUT_MS)
    for element_id, key in (("chat-unload", "chat.unload"), ("chat-send", "chat.send"), ("chat-clear", "chat.clear")):
        assert text_of(page, f"#{element_id}") == translate(key, "zh-CN")
    assert translate("chat.side_by_side", "zh-CN") in text_of(page, "#chat-side-by-side")
    assert translate("chat.system", "zh-CN") in text_of(page, "#chat-system")
    # The status is drawn by the tab's select event, in the page's language.
    page.wait_for_function("() => /[\\u4e00-\\u9fff]/.test(document.querySelector('#chat-status').innerText)", timeout=UI_TIMEOUT_MS, polling=200)
    wait_until_idle(page)
    text = visible_text(page)
    found = english_in(text) + english_words(text) + stray_english(text)
    assert found == [], (found, text[-1500:])
    shoot(page, "chat-zh")


def test_the_app_stopped_leaves_no_chat_server(app_server, page_of) -> None:
    page = page_of(editable=False)
    open_chat(page)
    if "Ready" not in text_of(page, "#chat-status"):
        load(page, side_by_side=True)
    assert chat_servers(app_server)
    app_server.stop()  # SIGTERM, as a service manager stops it
    wait_until(lambda: chat_servers(app_server) == [], 30, what="the chat servers to end with the app")
