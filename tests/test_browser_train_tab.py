"""The Train tab without a surprise (issue 27, second round), in headless Chromium, in English
and in Chinese.

- Start is usable only when it can act: with a problem in the form (a hub model id and no
  dataset folder loaded from a YAML, a run name the check refuses) it is disabled, and the
  action bar says what to fix first.
- A page opened after a reload shows the latest *training* run, not an evaluation; a new run's
  form that was not started (a draft) is kept in the browser across a reload, and says it is
  a draft, never a run's settings.
- The sticky action bar: no field label is drawn through it, and it shows the state of Start
  and of the run (pressed while scrolled down, Start says "starting" where it was pressed).
- A field's problem is marked as a problem (its colour, its icon and the word), a warning as
  a warning.
- The presets: the CPU preset's line agrees with the form (fp32), the list is sorted by
  family and size, the names and the line are in the page's language; a Unicode run name
  ("水果") is a run name (its directory stays ASCII); durations and throughput in the page's
  language.

One app server for the module over two hand-made runs (a finished training run, then a newer
evaluation of it) and one real CPU-demo run started through the page (the last test that
needs the hand-made runs to be the newest runs on disk comes before it: pytest keeps the
file's order). Every word is looked up with `translate()`; tests wait for states, never for a
time.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
import yaml
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from backend.config.presets import PRESETS_DIR
from backend.i18n import translate
from backend.runs import RunStore
from backend.service import demo_form
from backend.view import DOCTOR_ICONS
from tests.harness import PYTHON, ROOT, fake_run, wait_until
from tests.test_browser_first_hour import (
    UI_TIMEOUT_MS,
    field,
    fill,
    folded,
    open_tab,
    pick_dropdown,
    plain,
    run_ids,
    set_code,
    stop_trainers,
    text_of,
    wait_for_button,
    wait_for_text,
    wait_for_text_gone,
    wait_for_value,
    wait_until_editable,
    wait_until_idle,
)

pytestmark = pytest.mark.browser

VIEWPORT = {"width": 1400, "height": 1000}
LOCALES = {"en-US": "en", "zh-CN": "zh-CN"}
DEMO = demo_form()
# The order the issue asks for: the default first, then Instinct by size, then Radeon PRO,
# then the Radeon RX cards by size and generation.
PRESET_ORDER = ("cpu-demo", "mi325x", "mi300x", "mi250", "w7900", "rx7900xtx", "rx7900xt", "rx7800xt", "rx6900xt")


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hand_made_runs(app_server):
    """A finished training run (10 logged steps, 60 s, 1234.5 tokens/s) and, newer, a
    finished evaluation of it: {"train": id, "eval": id}."""
    train_id, _, _ = fake_run(app_server.runs_dir, points=10, active=False)
    store = RunStore(app_server.runs_dir)
    files = {"config.yaml": "", "form.json": json.dumps(demo_form()), "train.log": ""}
    evaluation = store.create(name="eval-stand-in", preset="cpu-demo", model="demo", files=files, kind="evaluate", source_run=train_id)
    # Newer than the training run by its creation time (ids are to the second).
    later = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + 5))
    store.update(evaluation.id, state="finished", exit_code=0, created=later, started_at=time.time() - 3, ended_at=time.time())
    return {"train": train_id, "eval": evaluation.id}


@pytest.fixture
def page_in(new_tab, app_server, hand_made_runs):
    """A tab on the module's app with the browser's language set, once the load event has
    relabelled it; closed afterwards."""

    def opener(browser_locale: str):
        page = new_tab(browser_locale)
        load(page, app_server, LOCALES[browser_locale])
        return page

    return opener


# --- helpers -------------------------------------------------------------------------------------


def preset_file(preset_id: str) -> dict:
    return yaml.safe_load((PRESETS_DIR / f"{preset_id}.yaml").read_text(encoding="utf-8"))


def preset_name(preset_id: str, locale: str) -> str:
    """The name a preset's file gives it in `locale` (its Chinese name: display_name_zh)."""
    data = preset_file(preset_id)
    return data["display_name"] if locale == "en" else data.get("display_name_zh", f"<{preset_id} has no Chinese name>")


def load(page, server, locale: str) -> None:
    page.goto(f"{server.url}/?__theme=light")
    page.wait_for_selector("#start", timeout=UI_TIMEOUT_MS)
    page.wait_for_function(
        "(text) => document.querySelector('#start').innerText.trim() === text", arg=translate("button.start", locale), timeout=UI_TIMEOUT_MS
    )
    # The line above the form says what it shows once the load event has decided (its
    # Markdown: the element also holds Gradio's timer while the event runs).
    page.wait_for_function(
        "() => (document.querySelector('#form-mode [data-testid=markdown]')?.innerText ?? '').trim().length > 0", timeout=UI_TIMEOUT_MS, polling=200
    )
    wait_until_idle(page)


def new_run(page) -> None:
    """An editable form for a new run ("New run from these settings" when it shows a run)."""
    if page.locator("#new-run").is_visible():
        page.locator("#new-run").click()
    wait_until_editable(page)
    wait_until_idle(page)


def label(name: str, locale: str) -> str:
    return translate(f"label.{name}", locale)


def bar_text(page) -> str:
    return folded(page.locator("#actions").inner_text())


def hub_yaml_without_dataset_folder() -> str:
    return yaml.safe_dump(
        {"model_name_or_path": "Qwen/Qwen2.5-0.5B", "stage": "sft", "do_train": True, "finetuning_type": "lora", "template": "qwen", "dataset": "alpaca_en", "max_steps": 10},
        sort_keys=False,
    )


def load_yaml_into_form(page, text: str, locale: str, model_path: str) -> None:
    open_tab(page, "tab.import_export", locale)
    set_code(page, "#import-yaml", text)
    page.locator("#load-into-form").click()
    wait_until_editable(page)
    wait_for_value(page, "model_path", model_path)
    wait_until_idle(page)


# --- 1. Start acts only when it can ----------------------------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_start_is_disabled_with_the_reason_beside_it_while_the_form_has_problems(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    load_yaml_into_form(page, hub_yaml_without_dataset_folder(), locale, "Qwen/Qwen2.5-0.5B")

    assert wait_for_button(page, "start", enabled=False), "Start is usable while the form has problems (a hub id offline, no dataset folder)"
    reason = wait_for_text(page, "#start-reason", label("model_path", locale))
    assert label("dataset_dir", locale) in folded(reason), reason
    assert page.locator("#start-reason").is_visible()
    # Beside Start: inside the action bar that stays in view.
    assert page.locator("#actions #start-reason").count() == 1

    before = run_ids(app_server)
    fill(page, "model_path", DEMO["model_path"])
    fill(page, "dataset_dir", DEMO["dataset_dir"])
    fill(page, "dataset", DEMO["dataset"])
    fill(page, "template", DEMO["template"])
    assert wait_for_button(page, "start", enabled=True), f"Start stays disabled once the form is fixed: {text_of(page, '#start-reason')!r}"
    wait_for_text_gone(page, "#start-reason", label("model_path", locale))

    # A run name the check refuses: the same, for the run name.
    fill(page, "run_name", "../escape")
    assert wait_for_button(page, "start", enabled=False), "Start is usable with a run name the check refuses"
    assert label("run_name", locale) in folded(wait_for_text(page, "#start-reason", label("run_name", locale)))
    fill(page, "run_name", "fixed-name")
    assert wait_for_button(page, "start", enabled=True)
    assert run_ids(app_server) == before, "a run was created"


# --- 7. a reload opens on the latest training run; a draft is kept --------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_reload_opens_on_the_latest_training_run_not_an_evaluation(app_server, hand_made_runs, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    mode = wait_for_text(page, "#form-mode", hand_made_runs["train"], hand_made_runs["eval"])
    assert hand_made_runs["eval"] not in mode, f"the page opened on the evaluation: {mode!r}"
    assert plain(translate("form.mode_run", locale, run_id=hand_made_runs["train"])) in folded(mode), mode
    assert hand_made_runs["train"] in wait_for_text(page, "#status", hand_made_runs["train"])


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_form_not_started_is_kept_as_a_draft_across_a_reload(app_server, hand_made_runs, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    new_run(page)
    fill(page, "run_name", f"draft-{locale.lower()}")
    fill(page, "max_steps", "77")
    # The draft is written by the same event that redraws the YAML preview: once the preview
    # has the last value, this browser holds the draft with it.
    page.locator(".label-wrap", has_text=translate("accordion.preview", locale)).first.click()
    page.wait_for_function("() => (document.querySelector('#preview-yaml .cm-content')?.innerText ?? '').includes('max_steps: 77')", timeout=UI_TIMEOUT_MS)
    wait_until_idle(page)

    load(page, app_server, locale)
    wait_for_value(page, "run_name", f"draft-{locale.lower()}")
    wait_for_value(page, "max_steps", "77")
    assert field(page, "max_steps").is_enabled(), "the draft came back read-only"
    mode = folded(text_of(page, "#form-mode"))
    assert plain(translate("form.mode_draft", locale)) in mode, mode
    # Never mistaken for a run's settings: the line says draft, not "Settings of run ...".
    assert plain(translate("form.mode_run", locale, run_id=hand_made_runs["train"])) not in mode
    assert wait_for_button(page, "start", enabled=True)
    # The panel still shows the latest training run.
    assert hand_made_runs["train"] in wait_for_text(page, "#status", hand_made_runs["train"])

    # The preset still fills the form over the draft.
    pick_dropdown(page, "preset", preset_name("rx7900xtx", locale))
    wait_for_value(page, "cutoff_len", str(preset_file("rx7900xtx")["cutoff_len"]))


# --- 9. the action bar ------------------------------------------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_no_field_label_is_drawn_through_the_action_bar(page_in, browser_locale) -> None:
    page = page_in(browser_locale)
    # A window low enough that the training fields' labels pass under the bar.
    page.set_viewport_size({"width": VIEWPORT["width"], "height": 600})
    new_run(page)
    for element_id in ("learning-rate", "max-steps", "run-name"):
        # Scroll the field's label to the middle of the bar; what is drawn there is the bar.
        seen = page.evaluate(
            """(id) => {
                const bar = document.querySelector('#actions').getBoundingClientRect();
                const span = document.querySelector('#' + id + ' [data-testid=block-info]');
                const box = span.getBoundingClientRect();
                window.scrollBy(0, box.top + box.height / 2 - (bar.top + bar.height / 2));
                const again = document.querySelector('#actions').getBoundingClientRect();
                const label = span.getBoundingClientRect();
                const y = label.top + label.height / 2;
                if (y < again.top || y > again.bottom) return 'the label did not get under the bar';
                const hit = document.elementFromPoint(label.left + 4, y);
                return hit && hit.closest('#actions') ? 'bar' : ('drawn over the bar: ' + (hit ? hit.outerHTML.slice(0, 120) : 'nothing'));
            }""",
            element_id,
        )
        assert seen == "bar", f"#{element_id}'s label: {seen}"


# --- 12. a field's problem looks like a problem, a warning like a warning ----------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_fields_problem_and_warning_are_marked_as_such(page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    new_run(page)
    colour_js = "(id) => { const e = document.querySelector('#' + id + ' [data-testid=block-info] + div') ; return e ? getComputedStyle(e).color : null; }"
    label_colour = page.evaluate("() => getComputedStyle(document.querySelector('#learning-rate [data-testid=block-info]')).color")

    fill(page, "learning_rate", "-1")
    problem = wait_for_text(page, "#learning-rate", "(0, 1]")
    assert f"{DOCTOR_ICONS['problem']} {translate('word.problem', locale)}" in folded(problem), problem
    assert "rb-field-problem" in (page.locator("#learning-rate").get_attribute("class") or "")
    problem_colour = page.evaluate(colour_js, "learning-rate")

    fill(page, "cutoff_len", "16")
    warning = wait_for_text(page, "#cutoff-len", "16")
    assert f"{DOCTOR_ICONS['warning']} {translate('word.warning', locale)}" in folded(warning), warning
    assert "rb-field-warning" in (page.locator("#cutoff-len").get_attribute("class") or "")
    warning_colour = page.evaluate(colour_js, "cutoff-len")
    assert len({label_colour, problem_colour, warning_colour}) == 3, f"label {label_colour}, problem {problem_colour}, warning {warning_colour}"

    fill(page, "learning_rate", "0.0001")
    wait_for_text_gone(page, "#learning-rate", "(0, 1]")
    page.wait_for_function("() => !document.querySelector('#learning-rate').classList.contains('rb-field-problem')", timeout=UI_TIMEOUT_MS)


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_gpus_on_this_machine_shows_only_for_this_machine_and_a_gpu_named_twice_is_marked(page_in, browser_locale) -> None:
    """Issue 30's named GPUs: the one field under "Where it runs", shown while Run on says this
    machine (the Slurm fields while it says Slurm), checked as it is typed, in the page's language."""
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    new_run(page)
    page.get_by_text(translate("accordion.placement", locale)).click()
    page.wait_for_selector("#local-gpus", state="visible", timeout=UI_TIMEOUT_MS)
    assert label("local_gpus", locale) in page.locator("#local-gpus").inner_text()
    assert not page.locator("#slurm-partition").is_visible()
    fill(page, "local_gpus", "0,0")
    wait_for_text(page, "#local-gpus", translate("check.local-gpus-duplicate.problem", locale, gpu=0))
    page.locator("#run-on").get_by_text(translate("run_on.slurm", locale)).click()
    page.wait_for_selector("#slurm-partition", state="visible", timeout=UI_TIMEOUT_MS)
    page.wait_for_selector("#local-gpus", state="hidden", timeout=UI_TIMEOUT_MS)
    page.locator("#run-on").get_by_text(translate("run_on.local", locale)).click()
    page.wait_for_selector("#local-gpus", state="visible", timeout=UI_TIMEOUT_MS)
    fill(page, "local_gpus", "")
    wait_for_text_gone(page, "#local-gpus", translate("check.local-gpus-duplicate.problem", locale, gpu=0))


# --- 15. presets, names, units ------------------------------------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_presets_are_sorted_named_and_described_in_the_pages_language(page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    new_run(page)
    wait_for_value(page, "preset", preset_name("cpu-demo", locale))
    notes = folded(text_of(page, "#preset-notes"))
    # The CPU preset trains in fp32, as its form and the Doctor say: not "use fp16".
    assert page.locator("#precision input[value=fp32]").is_checked()
    assert "fp32" in notes and "fp16" not in notes, notes
    assert plain(translate("preset.env", locale, vars="")).strip(" :：") in notes, notes
    if locale == "zh-CN":
        assert "env:" not in notes, notes

    page.locator("#preset input").click()
    # Each option's text, without the ✓ Gradio puts before the chosen one.
    shown = [folded(t).removeprefix("✓").strip() for t in page.locator("#preset ul.options li").all_inner_texts()]
    assert shown == [preset_name(i, locale) for i in PRESET_ORDER], shown


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_durations_and_throughput_are_in_the_pages_language(hand_made_runs, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    # The hand-made training run: 10 of 100 steps, 1234.5 tokens/s, 60 s from start to end.
    progress = folded(wait_for_text(page, "#progress", translate("progress.step", locale, step=10, total=100)))
    if locale == "en":
        assert "elapsed 1m 00s" in progress and "1,234 tokens/s" in progress, progress
    else:
        assert "已用时 1 分 00 秒" in progress and "1,234 词元/秒" in progress, progress
        assert "token" not in progress and "0:01:00" not in progress, progress


# --- 9 and 15: Start pressed far down the form, with a Chinese run name (the one real run) -------------------------

RECORD_BAR_JS = """() => {
    const record = {bars: []};
    const look = () => {
        const bar = document.querySelector('#actions');
        const text = bar ? bar.innerText.split(/\\s+/).join(' ') : '';
        if (record.bars[record.bars.length - 1] !== text) record.bars.push(text);
    };
    look();
    window.__barObserver = new MutationObserver(look);
    window.__barObserver.observe(document.body, {subtree: true, childList: true, characterData: true});
    window.__barRecord = record;
}"""


@pytest.mark.timeout(900)
def test_start_pressed_scrolled_down_says_starting_in_the_bar_and_a_chinese_name_runs(app_server, hand_made_runs, page_in) -> None:
    locale = "en"
    page = page_in("en-US")
    new_run(page)
    fill(page, "max_steps", "3")
    fill(page, "run_name", "水果")
    wait_until_idle(page)
    assert wait_for_button(page, "start", enabled=True), f"Start is disabled for the run name 水果: {text_of(page, '#start-reason')!r}"
    assert translate("field.run_name", locale) not in text_of(page, "#findings")

    middle = page.evaluate("() => Math.round((document.documentElement.scrollHeight - window.innerHeight) / 2)")
    page.evaluate("(y) => window.scrollTo(0, y)", middle)
    page.wait_for_function("(y) => Math.abs(window.scrollY - y) <= 2", arg=middle, timeout=UI_TIMEOUT_MS)
    before = run_ids(app_server)
    try:
        page.evaluate(RECORD_BAR_JS)
        page.locator("#start").click()
        state = wait_until(lambda: next((s for s in app_server.runs() if s["id"] not in before), None), 180, what="the run to appear")
        run_id = state["id"]
        ends = [translate(f"state.{s}", locale) for s in ("finished", "failed", "stopped")]
        wait_for_text(page, "#bar-status", run_id, timeout_ms=120_000)
        bar = wait_for_text(page, "#bar-status", *ends, timeout_ms=420_000)
        record = page.evaluate("() => { window.__barObserver.disconnect(); return window.__barRecord; }")
        starting = plain(translate("status.starting", locale))
        assert any(starting in b for b in record["bars"]), f"the bar never said {starting!r}: {record['bars']}"
        assert translate("state.finished", locale) in bar, bar
        box = page.locator("#bar-status").bounding_box()
        assert box is not None and 0 <= box["y"] and box["y"] + box["height"] <= VIEWPORT["height"], f"the bar's state is out of view: {box}"

        # The name is Unicode; the directory (the run id) is not.
        assert state["name"] == "水果"
        assert re.fullmatch(r"[A-Za-z0-9._-]+", run_id), run_id
        status = subprocess.run(
            [PYTHON, str(ROOT / "app.py"), "status", run_id, "--runs-dir", str(app_server.runs_dir), "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["name"] == "水果"
        open_tab(page, "tab.runs", locale)
        try:
            wait_for_text(page, "#runs-table", run_id, timeout_ms=30_000)
        except PlaywrightTimeout:  # the first visit's refresh did not arrive: a second visit must show it
            open_tab(page, "tab.train", locale)
            open_tab(page, "tab.runs", locale)
            wait_for_text(page, "#runs-table", run_id)
        row = page.locator("#runs-table tbody tr", has_text=run_id).first
        assert "水果" in row.inner_text(), row.inner_text()

        # Started: the form is that run's settings after a reload, not a draft.
        load(page, app_server, locale)
        mode = wait_for_text(page, "#form-mode", run_id)
        assert plain(translate("form.mode_draft", locale)) not in folded(mode), mode
    finally:
        stop_trainers(app_server)
