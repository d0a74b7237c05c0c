"""The Evaluate tab in headless Chromium: pick a trained run, evaluate it on held-out data with
LLaMA-Factory's predict mode, see the predictions and scores, find the scores in the runs
table, open the evaluation in the Train tab; and the tab in Chinese.

What a person new to it is promised: the data offered as held out is never data the run trained
on, and the tab says what it evaluates on and why (or why there is nothing to evaluate on);
Stop is usable, and red, only while an evaluation runs; the predictions table says when it has
nothing to show (never numbered placeholder headers), and shows the user's own prompt, the chat
template only on demand.

One app server for the module, over a copy of the session's trained demo run (it trained on
the demo's `demo` dataset, without a validation split; real llamafactory-cli predict on the
offline CPU demo model). The order of the file matters: the first tests look at the tab before
a dataset is registered and before any evaluation (pytest keeps the file's order); one
evaluation is run, by a module fixture, for the tests that need one. Every word is looked up
with `translate()`.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from backend.demo import DEMO_DIR
from backend.evaluate import format_scores, parse_scores
from backend.i18n import translate
from backend.service.data_desk import DEFAULT_MAX_UPLOAD_BYTES, DataDesk
from backend.view import code_span
from tests.harness import AppServer, copy_run, wait_until
from tests.test_browser_app import UI_TIMEOUT_MS, fill, folded, plain, shoot, text_of, wait_for_text, wait_until_idle

pytestmark = pytest.mark.browser

EVAL_TIMEOUT_MS = 240_000
LOCALES = {"en-US": "en", "zh-CN": "zh-CN"}
SAMPLE = "demo-sample"  # a dataset of its own (a file of 12 rows of the demo's tasks)
COPY = "demo-copy"  # the demo's own file, registered under another name: still what the run trained on


@pytest.fixture(scope="module")
def eval_server(demo_assets, trained_demo_run, tmp_path_factory):
    src_runs, run_id = trained_demo_run
    server = AppServer(workdir=tmp_path_factory.mktemp("eval-app"))
    copy_run(src_runs, run_id, server.runs_dir)
    server.start()
    try:
        yield server, run_id
    finally:
        server.stop()


@pytest.fixture(scope="module")
def app_server(eval_server):
    """The module's app, for the shared `page_of` fixture (tests/conftest.py)."""
    return eval_server[0]


@pytest.fixture(scope="module")
def registered(eval_server, tmp_path_factory):
    """Two datasets registered as the Data tab does (into the app's runs/datasets/): `demo-copy`,
    byte for byte the file the run trained on, and `demo-sample`, a file of its own."""
    server, _ = eval_server
    folder = tmp_path_factory.mktemp("eval-data")
    rows = json.loads((DEMO_DIR / "data" / "demo.json").read_text())
    (folder / "demo-copy.json").write_bytes((DEMO_DIR / "data" / "demo.json").read_bytes())
    (folder / "demo-sample.json").write_text(json.dumps(rows[:12], indent=1))
    desk = DataDesk(server.runs_dir, [folder], DEFAULT_MAX_UPLOAD_BYTES)
    for name in (COPY, SAMPLE):
        added = desk.add("upload", str(folder / f"{name}.json"), name)
        assert added.name == name, added.message
    return [COPY, SAMPLE]


def open_evaluate_tab(page, run_id: str, locale: str = "en") -> None:
    page.get_by_role("tab", name=translate("tab.evaluate", locale)).click()
    page.wait_for_function(
        "(id) => (document.querySelector('#eval-run input')?.value ?? '').includes(id)", arg=run_id, timeout=UI_TIMEOUT_MS, polling=250
    )
    wait_until_idle(page)


def evaluations(server) -> list[dict]:
    return [state for state in server.runs() if state.get("kind") == "evaluate"]






def dropdown_choices(page, element_id: str) -> list[str]:
    """The choices a Gradio dropdown offers (opened, read, closed)."""
    page.locator(f"#{element_id} input").click()
    page.locator(f"#{element_id} ul.options li").first.wait_for(timeout=UI_TIMEOUT_MS)
    # An option's text is its label, after a check mark on the one chosen.
    choices = [text.strip().split("\n")[-1].strip() for text in page.locator(f"#{element_id} ul.options li").all_inner_texts()]
    page.keyboard.press("Escape")
    return choices


def button_state(page, element_id: str) -> dict:
    """Whether a button can be pressed, and whether it is drawn as Gradio's red `stop` variant."""
    return page.evaluate(
        "(id) => { const b = document.querySelector('#' + id); return {enabled: !!b && !b.disabled, red: !!b && b.classList.contains('stop')}; }", element_id
    )


def wait_for_button_state(page, element_id: str, enabled: bool, red: bool) -> dict:
    page.wait_for_function(
        "([id, enabled, red]) => { const b = document.querySelector('#' + id); return !!b && b.disabled === !enabled && b.classList.contains('stop') === red; }",
        arg=[element_id, enabled, red],
        timeout=UI_TIMEOUT_MS,
        polling=100,
    )
    return button_state(page, element_id)


def table_headers(page) -> list[str]:
    # Gradio draws the header row twice (the table's and a sticky copy): the first one.
    return [text.strip() for text in page.locator("#eval-table thead").first.locator("th").all_inner_texts() if text.strip()]


# --- 13. the predictions table, before any evaluation ----------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_an_empty_predictions_table_says_so_instead_of_numbered_headers(eval_server, page_of, browser_locale) -> None:
    server, source = eval_server
    assert evaluations(server) == [], "this test looks at the tab before any evaluation: it must run before the module's evaluation"
    locale = LOCALES[browser_locale]
    page = page_of(browser_locale, editable=False)
    open_evaluate_tab(page, source, locale)
    empty = wait_for_text(page, "#eval-table-empty", folded(translate("eval.table.empty", locale)))
    assert folded(translate("eval.table.empty", locale)) in folded(empty)
    # No table at all, so no placeholder header row ("1 2 3") either.
    assert not page.locator("#eval-table").is_visible(), table_headers(page)
    assert not re.search(r"(^|\s)1\s+2\s+3(\s|$)", page.locator("#tab-evaluate").inner_text())


# --- 4. held-out data is never what the run trained on --------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_run_without_a_validation_split_is_offered_nothing_it_trained_on(eval_server, page_of, browser_locale) -> None:
    """Before any dataset is registered: the only data RocBoard knows of is the demo's, which
    the run trained on (without a validation split). Nothing is offered, the tab says why, and
    Evaluate cannot be pressed."""
    server, source = eval_server
    assert not (server.runs_dir / "datasets").exists(), "this test runs before the module registers datasets"
    locale = LOCALES[browser_locale]
    page = page_of(browser_locale, editable=False)
    open_evaluate_tab(page, source, locale)
    assert page.locator("#eval-dataset input").input_value() == ""
    expected = plain(translate("eval.held_out.none", locale, datasets=code_span("demo")))
    note = wait_for_text(page, "#eval-dataset-note", expected)
    assert expected in folded(note)
    assert not button_state(page, "eval-start")["enabled"], "Evaluate is usable with no held-out data to evaluate on"


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_held_out_data_excludes_the_training_data_even_under_another_name_and_says_why(eval_server, registered, page_of, browser_locale) -> None:
    server, source = eval_server
    locale = LOCALES[browser_locale]
    page = page_of(browser_locale, editable=False)
    open_evaluate_tab(page, source, locale)
    sample = translate("eval.dataset.registered", locale, name=SAMPLE)
    page.wait_for_function(
        "(label) => document.querySelector('#eval-dataset input')?.value === label", arg=sample, timeout=UI_TIMEOUT_MS, polling=250
    )
    # Neither the demo's dataset nor its copy under another name: the run trained on both.
    assert dropdown_choices(page, "eval-dataset") == [sample]
    why = plain(translate("eval.held_out.registered", locale, name=code_span(SAMPLE)))
    left_out = plain(translate("eval.held_out.left_out", locale, names=translate("actions.separator", locale).join((code_span("demo"), code_span(COPY)))))
    note = folded(wait_for_text(page, "#eval-dataset-note", why))
    assert why in note and left_out in note, note
    assert button_state(page, "eval-start")["enabled"]


# --- one evaluation for the tests below ------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluated(eval_server, registered, chromium):
    """One evaluation through the page (12 rows of demo-sample, 16 new tokens), with the state of
    Stop seen before it starts, while it runs and after it ended: {"id", "before", "running", "after"}."""
    from tests.test_browser_app import open_page

    server, source = eval_server
    context, page = open_page(chromium, server, "en-US", editable=False)
    try:
        open_evaluate_tab(page, source)
        sample = translate("eval.dataset.registered", "en", name=SAMPLE)
        if page.locator("#eval-dataset input").input_value() != sample:  # the only choice, and so the default, since item 4
            page.locator("#eval-dataset input").click()
            page.locator("#eval-dataset ul.options li", has_text=sample).first.click()
        seen = {"before": button_state(page, "eval-stop")}
        fill(page, "eval-max-samples", "12")
        fill(page, "eval-max-new-tokens", "16")
        page.locator("#eval-start").click()
        # The predict run loads for seconds before it predicts: Stop can be seen usable then.
        try:
            seen["running"] = wait_for_button_state(page, "eval-stop", enabled=True, red=True)
        except PlaywrightTimeout:
            seen["running"] = button_state(page, "eval-stop")
        wait_for_text(page, "#eval-scores", "BLEU-4", timeout_ms=EVAL_TIMEOUT_MS)
        try:
            seen["after"] = wait_for_button_state(page, "eval-stop", enabled=False, red=False)
        except PlaywrightTimeout:
            seen["after"] = button_state(page, "eval-stop")  # the test says what it was
        [evaluation] = evaluations(server)
        seen["id"] = evaluation["id"]
        return seen
    finally:
        context.close()


# --- 6. Stop, only while an evaluation runs ---------------------------------------------------------


def test_stop_is_red_and_usable_only_while_an_evaluation_runs(eval_server, evaluated) -> None:
    assert evaluated["before"] == {"enabled": False, "red": False}, f"Stop before any evaluation runs: {evaluated['before']}"
    assert evaluated["running"] == {"enabled": True, "red": True}
    assert evaluated["after"] == {"enabled": False, "red": False}


# --- the evaluation's page ---------------------------------------------------------------------------


def test_evaluate_shows_predictions_and_scores_and_the_runs_table_has_them(eval_server, evaluated, page_of) -> None:
    server, source = eval_server
    page = page_of(editable=False)
    open_evaluate_tab(page, source)
    [evaluation] = evaluations(server)
    assert evaluation["source_run"] == source and evaluation["state"] == "finished"
    assert evaluation["launch"] in ("warm", "cold")  # started like a trainer
    eval_id = evaluation["id"]
    status = wait_for_text(page, "#eval-status", translate("eval.status.finished", "en", run_id=eval_id, rows=12))
    assert eval_id in status
    assert not button_state(page, "eval-stop")["enabled"], "Stop is usable on a finished evaluation"
    scores = parse_scores((server.runs_dir / eval_id / "output" / "predict_results.json").read_text())
    assert format_scores(scores).split(" · ")[0] in text_of(page, "#eval-scores")
    shoot(page, "evaluate-en")

    # The runs table: both rows carry the scores (how it marks an evaluation is the Runs tab's).
    page.get_by_role("tab", name=translate("tab.runs", "en")).click()
    runs_table = wait_for_text(page, "#runs-table", eval_id)
    shoot(page, "evaluate-runs-table-en")
    assert runs_table.count(format_scores(scores)) == 2
    assert translate("eval.column.scores", "en") in runs_table

    # Open it in the Train tab: its status and log are there.
    page.get_by_role("tab", name=translate("tab.evaluate", "en")).click()
    page.locator("#eval-open").click()
    wait_for_text(page, "#status", eval_id)
    assert json.loads((server.runs_dir / eval_id / "state.json").read_text())["kind"] == "evaluate"


# --- 13. the predictions table: proper headers, the user's prompt, the template on demand -----------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_predictions_table_shows_the_users_prompt_and_the_template_on_demand(eval_server, evaluated, page_of, browser_locale) -> None:
    server, source = eval_server
    locale = LOCALES[browser_locale]
    page = page_of(browser_locale, editable=False)
    open_evaluate_tab(page, source, locale)
    table = wait_for_text(page, "#eval-table", "The opposite of down is up.")
    assert table_headers(page) == [translate(f"eval.table.{column}", locale) for column in ("prompt", "reference", "prediction")]
    assert not page.locator("#eval-table-empty").is_visible()
    # The prompt as the user wrote it (instruction and input), without the chat template's tokens.
    assert "Give the opposite of the word." in table
    assert "<|start_header_id|>" not in table and "<|eot_id|>" not in table and "<|begin_of_text|>" not in table
    # On demand, the prompt as the model read it: the template's tokens shown as the text they
    # are, never taken for HTML.
    page.locator("#eval-show-template input").check()
    templated = wait_for_text(page, "#eval-table", "<|start_header_id|>")
    assert "Give the opposite of the word." in templated and "<|eot_id|>" in templated
    page.locator("#eval-show-template input").uncheck()
    page.wait_for_function("() => !document.querySelector('#eval-table').innerText.includes('<|start_header_id|>')", timeout=UI_TIMEOUT_MS, polling=250)
    # The prompt column does not take half the table.
    widths = page.evaluate("() => [...document.querySelector('#eval-table thead').querySelectorAll('th')].map(th => th.getBoundingClientRect().width).filter(w => w > 0)")
    assert len(widths) == 3 and widths[0] < 0.4 * sum(widths), widths


def test_the_evaluate_tab_in_chinese(eval_server, registered, page_of) -> None:
    server, source = eval_server
    page = page_of("zh-CN", editable=False)
    open_evaluate_tab(page, source, "zh-CN")
    for key in ("eval.label.run", "eval.label.checkpoint", "eval.label.dataset", "eval.label.max_samples", "eval.button.start"):
        assert translate(key, "zh-CN") in page.locator("#tab-evaluate").inner_text() or translate(key, "zh-CN") in page.content()
    assert translate("word.final_adapter", "zh-CN") == page.locator("#eval-checkpoint input").input_value()
    # A refused start says why in Chinese, and makes nothing.
    before = len(server.runs())
    fill(page, "eval-max-samples", "0")
    page.locator("#eval-start").click()
    findings = wait_for_text(page, "#eval-findings", "max_samples")
    assert any("\u4e00" <= ch <= "\u9fff" for ch in findings)
    assert len(server.runs()) == before
    shoot(page, "evaluate-zh")


# --- English on the Chinese page: a trainer's own line is quoted beside our words --------------------


QUOTED_JS = """() => [...document.querySelectorAll('#findings li')].map(li => {
    const own = li.cloneNode(true);
    own.querySelectorAll('blockquote').forEach(q => q.remove());
    return {own: own.innerText, quoted: [...li.querySelectorAll('blockquote')].map(q => q.innerText).join(' ')};
})"""


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_llamafactorys_line_is_quoted_beside_our_words_never_inside_them(eval_server, page_of, browser_locale) -> None:
    """Evaluate during training with nothing held out: LLaMA-Factory would stop at start with
    its own English line. The finding says it in the page's words, and quotes the line apart."""
    locale = LOCALES[browser_locale]
    page = page_of(browser_locale, editable=True)
    accordion = page.locator(".label-wrap", has_text=translate("accordion.training", locale)).first
    if "open" not in (accordion.get_attribute("class") or "").split():
        accordion.click()
    page.locator("#eval-strategy input").click()
    page.locator("#eval-strategy ul.options li", has_text="steps").first.click()
    line = "Please make sure eval_dataset be provided or val_size >1e-6"
    ours = plain(translate("check.eval-without-data.problem", locale, strategy="steps"))
    wait_for_text(page, "#findings", ours[:30])
    wait_until(lambda: any(line in item["quoted"] for item in page.evaluate(QUOTED_JS)), 30, interval=0.25, what="the quoted line")
    [item] = [item for item in page.evaluate(QUOTED_JS) if ours[:30] in folded(item["own"])]
    assert line in item["quoted"], item
    assert "Please make sure" not in item["own"], f"LLaMA-Factory's line is inside the sentence: {item['own']!r}"
    if locale == "zh-CN":
        assert not re.search(r"[A-Za-z]{3,}(?: [A-Za-z]{2,}){3,}", item["own"]), f"an English clause in the Chinese sentence: {item['own']!r}"
