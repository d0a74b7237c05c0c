"""A person's first hour with the page, in headless Chromium, in English and in Chinese.

What the page promises someone new to it: the form shows the settings of the run on screen
(read-only, with "New run from these settings"); nothing on the page is stale (a warning, the
YAML preview and the estimate follow the fields without pressing Preview or Estimate, and the
status says "starting" the moment Start is pressed); Start, Stop and Resume are always at hand
and only usable when they act; "Load into the form" merges a YAML into the form and says what
it set and reset; "Apply fixes" writes what `app.py check --fix` writes; a dataset with a
wrong column is refused before anything is launched; the new training fields are labelled in
the page's language.

One app server for the module; each test opens its own browser context with the browser's
language set ("en-US" or "zh-CN": the page picks it). Every word is looked up with
`translate()`. Runs are real LLaMA-Factory runs of the offline CPU demo model, kept few: two
short finished runs shared by the tests that need them, and one long run per language that is
stopped. Tests wait for states, never for a time.

The order of the file matters in one place: the first test looks at the page before any run
exists, so it runs before the tests that start runs (pytest keeps the file's order).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from backend.config import schema
from backend.config.presets import load_presets
from backend.i18n import translate
from backend.service import demo_form
from backend.view import DOCTOR_ICONS
from tests.harness import AppServer, kill_tree, trainer_process, wait_until
from tests.test_browser_app import folded, plain

pytestmark = pytest.mark.browser

UI_TIMEOUT_MS = 60_000
RUN_TIMEOUT_S = 420
VIEWPORT = {"width": 1400, "height": 1000}
LOCALES = {"en-US": "en", "zh-CN": "zh-CN"}  # the browser's language -> the app's locale key
IDS = schema.element_ids()
DEMO = demo_form()
NEW_FIELDS = ("warmup_ratio", "warmup_steps", "lr_scheduler_type", "optim", "seed", "max_samples")

OLDER_RUN = {"max_steps": 4, "run_name": "first-hour-older"}
NEWER_RUN = {"max_steps": 3, "run_name": "first-hour-newer"}


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def app_server(demo_assets, tmp_path_factory):
    server = AppServer(workdir=tmp_path_factory.mktemp("first-hour-app")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def page_in(new_tab, app_server):
    """Opens a tab on the module's app with the browser's language set; closed afterwards."""

    def opener(browser_locale: str):
        page = new_tab(browser_locale)
        page.goto(f"{app_server.url}/?__theme=light")
        page.wait_for_selector("#start", timeout=UI_TIMEOUT_MS)
        locale = LOCALES[browser_locale]
        # The page speaks the browser's language once its load event has relabelled it.
        page.wait_for_function(
            "(text) => document.querySelector('#start').innerText.trim() === text", arg=translate("button.start", locale), timeout=UI_TIMEOUT_MS
        )
        wait_until_idle(page)
        return page

    return opener


@pytest.fixture(scope="module")
def finished_runs(app_server, chromium):
    """Two short demo runs started through the page (different max steps and run names), both
    finished: {"older": run_id, "newer": run_id}. The newer one is the newest run on disk."""
    context = chromium.new_context(locale="en-US", color_scheme="light", viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(f"{app_server.url}/?__theme=light")
        page.wait_for_selector("#start", timeout=UI_TIMEOUT_MS)
        wait_until_idle(page)
        older = start_through_page(app_server, page, **OLDER_RUN)
        wait_for_finished(page, older, "en")
        newer = start_through_page(app_server, page, **NEWER_RUN)
        wait_for_finished(page, newer, "en")
    finally:
        context.close()
    return {"older": older, "newer": newer}


# --- helpers ---------------------------------------------------------------------------------------






def wait_until_idle(page) -> None:
    page.wait_for_function("() => document.querySelectorAll('.wrap.default.full:not(.hide)').length === 0", timeout=UI_TIMEOUT_MS, polling=200)


def text_of(page, selector: str) -> str:
    return page.locator(selector).first.inner_text()


def wait_for_text(page, selector: str, *needles: str, timeout_ms: int = UI_TIMEOUT_MS) -> str:
    """Until the element's visible text (whitespace folded) holds any of `needles`."""
    page.wait_for_function(
        """([selector, needles]) => { const e = document.querySelector(selector); if (!e) return false;
            const text = e.innerText.split(/\\s+/).join(' '); return needles.some(n => text.includes(n)); }""",
        arg=[selector, [folded(n) for n in needles]],
        timeout=timeout_ms,
        polling=250,
    )
    return text_of(page, selector)


def wait_for_text_gone(page, selector: str, needle: str, timeout_ms: int = UI_TIMEOUT_MS) -> str:
    """Until the element's visible text no longer holds `needle`; AssertionError with what it
    still shows after `timeout_ms`."""
    try:
        page.wait_for_function(
            """([selector, needle]) => { const e = document.querySelector(selector);
                return !!e && !e.innerText.split(/\\s+/).join(' ').includes(needle); }""",
            arg=[selector, folded(needle)],
            timeout=timeout_ms,
            polling=250,
        )
    except PlaywrightTimeout:
        raise AssertionError(f"{selector} still shows {needle!r} after {timeout_ms / 1000:.0f} s: {text_of(page, selector)!r}") from None
    return text_of(page, selector)


def field(page, name: str):
    """The text box of a form field (an <input>, or a <textarea> for a text field)."""
    element_id = IDS[name]
    return page.locator(f"#{element_id} input, #{element_id} textarea").first


def fill(page, name: str, value: str) -> None:
    field(page, name).fill(value)


def wait_for_value(page, name: str, value: str) -> None:
    element_id = IDS[name]
    page.wait_for_function(
        "([id, value]) => { const e = document.querySelector(`#${id} input, #${id} textarea`); return !!e && e.value === value; }",
        arg=[element_id, value],
        timeout=UI_TIMEOUT_MS,
        polling=200,
    )


def wait_until_editable(page) -> None:
    page.wait_for_function(
        "() => { const e = document.querySelector('#run-name input, #run-name textarea'); return !!e && !e.disabled; }", timeout=UI_TIMEOUT_MS, polling=200
    )


def editable_form(page) -> None:
    """Makes the form editable ("New run from these settings" when it shows a run)."""
    page.wait_for_selector("#form-mode", timeout=UI_TIMEOUT_MS)
    if page.locator("#new-run").is_visible():
        page.locator("#new-run").click()
    wait_until_editable(page)
    wait_until_idle(page)


def wait_for_button(page, element_id: str, enabled: bool) -> bool:
    """Waits until the button is (not) disabled; returns whether it got there."""
    try:
        page.wait_for_function(
            "([id, enabled]) => { const b = document.querySelector('#' + id); return !!b && b.disabled === !enabled; }",
            arg=[element_id, enabled],
            timeout=UI_TIMEOUT_MS,
            polling=200,
        )
        return True
    except PlaywrightTimeout:
        return False


def run_ids(server) -> set[str]:
    return {state["id"] for state in server.runs()}


def run_dirs(server) -> set[str]:
    return {path.name for path in server.runs_dir.iterdir()} if server.runs_dir.exists() else set()


def start_through_page(server, page, max_steps: int, run_name: str) -> str:
    """Fills max steps and run name into an editable form, presses Start; the new run's id."""
    editable_form(page)
    before = run_ids(server)
    fill(page, "max_steps", str(max_steps))
    fill(page, "run_name", run_name)
    wait_until_idle(page)
    page.locator("#start").click()
    state = wait_until(lambda: next((s for s in server.runs() if s["id"] not in before), None), 180, what=f"the run {run_name!r} to appear")
    return state["id"]


def wait_for_finished(page, run_id: str, locale: str) -> str:
    wait_for_text(page, "#status", run_id, timeout_ms=120_000)
    ends = [translate(f"state.{state}", locale) for state in ("finished", "failed", "stopped")]
    status = wait_for_text(page, "#status", *ends, timeout_ms=RUN_TIMEOUT_S * 1000)
    assert translate("state.finished", locale) in status, status
    return status


def open_tab(page, key: str, locale: str) -> None:
    page.get_by_role("tab", name=translate(key, locale)).click()


def train_tab_selected(page, locale: str) -> bool:
    """Whether the Train tab is, or within UI_TIMEOUT_MS becomes, the selected tab: the switch is
    its own render, which may land after the fields the same event filled (CI saw that once)."""
    try:
        expect(page.get_by_role("tab", name=translate("tab.train", locale))).to_have_attribute("aria-selected", "true", timeout=UI_TIMEOUT_MS)
    except AssertionError:
        return False
    return True


def set_code(page, selector: str, text: str) -> None:
    """Types `text` into an empty CodeMirror editor as a paste would."""
    page.wait_for_selector(f"{selector} .cm-content", timeout=UI_TIMEOUT_MS)
    page.locator(f"{selector} .cm-content").click()
    page.keyboard.insert_text(text)


def code_text(page, selector: str) -> str:
    return page.evaluate("(sel) => document.querySelector(sel + ' .cm-content')?.innerText ?? ''", selector)


def pick_dropdown(page, element_id: str, option: str) -> None:
    """Chooses `option` (its shown text) in a Gradio dropdown."""
    page.locator(f"#{element_id} input").click()
    page.locator(f"#{element_id} ul.options li", has_text=option).first.click()


# Records, from before Start is pressed, every text the status line shows, any "processing |"
# overlay text that shows up in the form's column, and every value of the run name field: a
# state seen once is kept, however briefly it was on screen.
RECORD_START_JS = """() => {
    const start = document.querySelector('#start');
    let column = document.querySelector('#run-name');
    while (column && !column.contains(start)) column = column.parentElement;
    const record = {statuses: [], overlays: [], runNames: [], column: !!column};
    const look = () => {
        const status = document.querySelector('#status')?.innerText ?? '';
        if (record.statuses[record.statuses.length - 1] !== status) record.statuses.push(status);
        // The element (by its id) that shows it, once per element: the seconds count on.
        if (column && /processing \\|/.test(column.innerText)) {
            for (const wrap of column.querySelectorAll('.wrap')) {
                // A hidden tracker's innerText is its textContent: only one a person sees counts.
                const shown = wrap.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}) && wrap.getClientRects().length > 0;
                if (!shown || !/processing \\|/.test(wrap.innerText)) continue;
                const owner = wrap.closest('[id]')?.id ?? '?';
                if (!record.overlays.some(o => o.startsWith(owner + ': '))) record.overlays.push(owner + ': ' + wrap.innerText.split(/\\s+/).join(' ').trim());
            }
        }
        const name = document.querySelector('#run-name input, #run-name textarea')?.value;
        if (record.runNames[record.runNames.length - 1] !== name) record.runNames.push(name);
    };
    look();
    window.__firstHourObserver = new MutationObserver(look);
    window.__firstHourObserver.observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
    window.__firstHourRecord = record;
}"""

STOP_RECORDING_JS = """() => { window.__firstHourObserver?.disconnect(); return window.__firstHourRecord; }"""


def stop_trainers(server) -> None:
    for state in server.runs():
        process = trainer_process(state)
        if process is not None:
            kill_tree(process)


# --- 3a. buttons at hand, before any run -------------------------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_start_stays_in_view_and_stop_resume_are_off_before_any_run(app_server, page_in, browser_locale) -> None:
    assert app_server.runs() == [], "this test looks at a page with no run yet: it must run before the tests that start runs"
    page = page_in(browser_locale)
    assert wait_for_button(page, "start", enabled=True), "Start is not usable on a new page"
    assert wait_for_button(page, "stop", enabled=False) and page.locator("#stop").is_disabled()
    assert page.locator("#resume").is_disabled()

    def start_in_view(where: str) -> None:
        box = page.locator("#start").bounding_box()
        assert box is not None, f"{where}: Start is not rendered"
        assert box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"], f"{where}: Start is outside the window: {box}"

    page.evaluate("() => window.scrollTo(0, 0)")
    page.wait_for_function("() => window.scrollY === 0", timeout=UI_TIMEOUT_MS)
    start_in_view("at the top")
    height = page.evaluate("() => document.documentElement.scrollHeight")
    assert height > VIEWPORT["height"] + 200, f"the page is only {height} px high: scrolling proves nothing"
    middle = page.evaluate("() => Math.round((document.documentElement.scrollHeight - window.innerHeight) / 2)")
    page.evaluate("(y) => window.scrollTo(0, y)", middle)
    page.wait_for_function("(y) => Math.abs(window.scrollY - y) <= 2", arg=middle, timeout=UI_TIMEOUT_MS)
    start_in_view(f"scrolled to {middle} px")


# --- 2. nothing stale --------------------------------------------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_bad_learning_rate_is_flagged_at_once_and_the_flag_goes_when_fixed(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    editable_form(page)
    mark = DOCTOR_ICONS["problem"]  # a problem's mark (✗); a warning's is ⚠
    problem = translate("word.problem", locale)
    assert mark not in text_of(page, "#learning-rate")

    fill(page, "learning_rate", "-1")  # no Preview, no Estimate: only the field changes
    info = wait_for_text(page, "#learning-rate", mark)
    assert "-1" in info and "(0, 1]" in info, info
    findings = wait_for_text(page, "#findings", "learning_rate")
    assert problem in findings and "(0, 1]" in findings, findings
    assert page.locator("#learning-rate", has_text=mark).is_visible()

    fill(page, "learning_rate", "0.0001")
    assert "learning_rate" not in wait_for_text_gone(page, "#findings", "learning_rate")
    # The field's own warning goes too (the value under it is fine now).
    assert "(0, 1]" not in wait_for_text_gone(page, "#learning-rate", mark)


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_yaml_preview_follows_the_dataset_field(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    editable_form(page)
    page.locator(".label-wrap", has_text=translate("accordion.preview", locale)).first.click()
    page.wait_for_selector("#preview-yaml .cm-content", state="visible", timeout=UI_TIMEOUT_MS)
    page.wait_for_function(
        "(ds) => (document.querySelector('#preview-yaml .cm-content')?.innerText ?? '').includes('dataset: ' + ds)", arg=DEMO["dataset"], timeout=UI_TIMEOUT_MS
    )

    fill(page, "dataset", "first_hour_other")
    page.wait_for_function(
        "() => (document.querySelector('#preview-yaml .cm-content')?.innerText ?? '').includes('dataset: first_hour_other')", timeout=UI_TIMEOUT_MS
    )
    assert not re.search(rf"^dataset: {DEMO['dataset']}$", code_text(page, "#preview-yaml"), re.MULTILINE)

    fill(page, "dataset", DEMO["dataset"])
    page.wait_for_function(
        "(ds) => { const t = document.querySelector('#preview-yaml .cm-content')?.innerText ?? ''; return t.includes('dataset: ' + ds) && !t.includes('first_hour_other'); }",
        arg=DEMO["dataset"],
        timeout=UI_TIMEOUT_MS,
    )


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_estimate_follows_the_preset(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    editable_form(page)
    title = translate("estimate.title", locale)
    assert "24 GiB" not in wait_for_text(page, "#estimate", title)

    pick_dropdown(page, IDS["preset"], "RX 7900 XTX")  # a product name: the same in both languages
    page.wait_for_function("() => document.querySelector('#preset input').value.includes('RX 7900 XTX')", timeout=UI_TIMEOUT_MS)
    assert "24 GiB" in wait_for_text(page, "#estimate", "24 GiB")

    cpu_demo = load_presets()[0][DEMO["preset"]].name(locale)
    pick_dropdown(page, IDS["preset"], cpu_demo)
    page.wait_for_function("(name) => document.querySelector('#preset input').value === name", arg=cpu_demo, timeout=UI_TIMEOUT_MS)
    estimate = wait_for_text_gone(page, "#estimate", "24 GiB")
    assert title in estimate, estimate


# --- 6. an estimate on the CPU demo -------------------------------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_cpu_demo_gets_an_estimate(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    assert page.locator("#preset input").input_value() == load_presets()[0][DEMO["preset"]].name(locale)
    estimate = wait_for_text(page, "#estimate", translate("estimate.title", locale), plain(translate("estimate.unknown", locale)))
    assert plain(translate("estimate.unknown", locale)) not in folded(estimate), estimate
    assert translate("estimate.title", locale) in estimate


# --- 8. the new fields ---------------------------------------------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_new_training_fields_are_there_with_labels_in_the_pages_language(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    for name in NEW_FIELDS:
        element = page.locator(f"#{IDS[name]}")
        assert element.count() == 1, f"no #{IDS[name]} on the page"
        assert element.is_visible(), f"#{IDS[name]} is not shown"
        label = translate(f"label.{name}", locale)
        assert label in folded(element.inner_text()), f"#{IDS[name]} is not labelled {label!r}: {element.inner_text()!r}"


# --- 4. import into the form is a merge ----------------------------------------------------------------


def epochs_only_yaml() -> str:
    return (
        f"model_name_or_path: {DEMO['model_path']}\n"
        "stage: sft\n"
        "do_train: true\n"
        "finetuning_type: lora\n"
        "dataset: demo\n"
        "template: llama3\n"
        "num_train_epochs: 3.0\n"
    )


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_load_into_the_form_sets_what_the_yaml_has_and_resets_the_rest(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    editable_form(page)
    fill(page, "max_steps", "100")
    wait_for_value(page, "max_steps", "100")

    open_tab(page, "tab.import_export", locale)
    set_code(page, "#import-yaml", epochs_only_yaml())
    page.wait_for_function("() => document.querySelector('#import-yaml .cm-content').innerText.includes('num_train_epochs: 3.0')", timeout=UI_TIMEOUT_MS)
    page.locator("#load-into-form").click()

    # The summary's titles, without their counts ("From the YAML" of "From the YAML ({count}):").
    set_title, reset_title = (plain(re.split(r"\s*[（(]\{count\}", translate(key, locale))[0]) for key in ("import.loaded_set", "import.loaded_reset"))
    notice = wait_for_text(page, "#form-notice", set_title)
    assert page.locator("#run-name").is_visible() and train_tab_selected(page, locale), "Load into the form did not switch to the Train tab"
    assert set_title in folded(notice), notice
    assert reset_title in folded(notice), notice
    wait_for_value(page, "max_steps", "0")
    wait_for_value(page, "num_train_epochs", "3")
    assert field(page, "max_steps").input_value() == "0"
    assert field(page, "num_train_epochs").input_value() == "3"
    assert field(page, "max_steps").is_enabled()


# --- 5. Apply fixes is `app.py check --fix` --------------------------------------------------------------


def commented_yaml() -> str:
    return (
        "# my notes\n"
        f"model_name_or_path: {DEMO['model_path']}\n"
        "stage: sft\n"
        "do_train: true\n"
        "finetuning_type: lora\n"
        "dataset: demo  # keep\n"
        f"dataset_dir: {DEMO['dataset_dir']}\n"
        "template: llama3\n"
        "compute_type: bf16\n"
        "max_steps: 3\n"
    )


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_apply_fixes_gives_what_the_check_cli_writes(app_server, page_in, browser_locale, tmp_path: Path) -> None:
    from backend.check_cli import main as check_main

    locale = LOCALES[browser_locale]
    source, target = tmp_path / "train.yaml", tmp_path / "train.fixed.yaml"
    source.write_text(commented_yaml(), encoding="utf-8")
    check_main([str(source), "--preset", DEMO["preset"], "--fix", "--no-llamafactory", "--output", str(target)], out=io.StringIO())
    expected = target.read_text(encoding="utf-8")
    assert "compute_type" not in expected  # the CLI did fix something: the comparison means something

    page = page_in(browser_locale)
    from backend.config.presets import load_presets

    cpu_demo = load_presets()[0][DEMO["preset"]].name(locale)
    # The presets' names follow the page's language once its load event has relabelled them.
    page.wait_for_function("(name) => document.querySelector('#preset input')?.value === name", arg=cpu_demo, timeout=UI_TIMEOUT_MS)
    open_tab(page, "tab.import_export", locale)
    # The tab checks against the form's preset, and says so: the CLI was given the same one.
    page.wait_for_function("(name) => document.querySelector('#import-preset input')?.value === name", arg=cpu_demo, timeout=UI_TIMEOUT_MS)
    set_code(page, "#import-yaml", commented_yaml())
    page.wait_for_function("() => document.querySelector('#import-yaml .cm-content').innerText.includes('max_steps: 3')", timeout=UI_TIMEOUT_MS)
    page.locator("#apply-fixes").click()
    page.wait_for_function("() => !document.querySelector('#import-yaml .cm-content').innerText.includes('compute_type')", timeout=UI_TIMEOUT_MS)
    fixed = code_text(page, "#import-yaml")
    assert "# my notes" in fixed and "# keep" in fixed, fixed
    assert fixed.rstrip() == expected.rstrip(), f"the page:\n{fixed}\n--- app.py check --fix:\n{expected}"


# --- 7. a wrong column fails before launch -----------------------------------------------------------------


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_dataset_without_its_output_column_is_refused_before_launch(app_server, page_in, browser_locale, tmp_path: Path) -> None:
    locale = LOCALES[browser_locale]
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps({"bad": {"file_name": "bad.json"}}), encoding="utf-8")
    rows = [{"instruction": f"Say {i}", "input": "", "answer": str(i)} for i in range(3)]
    (data / "bad.json").write_text(json.dumps(rows), encoding="utf-8")

    page = page_in(browser_locale)
    editable_form(page)
    fill(page, "dataset_dir", str(data))
    fill(page, "dataset", "bad")
    fill(page, "run_name", "first-hour-bad-column")
    wait_until_idle(page)
    before_states, before_dirs = run_ids(app_server), run_dirs(app_server)

    # The live checks read the dataset's columns: Start cannot act, and the bar beside it says
    # which field to fix (docs/page.md, "Start acts only when it can").
    assert wait_for_button(page, "start", enabled=False), "Start is usable with a dataset that lacks its output column"
    reason = wait_for_text(page, "#start-reason", translate("label.dataset", locale))
    assert page.locator("#actions #start-reason").is_visible(), reason
    findings = wait_for_text(page, "#findings", "'output'")
    assert "'answer'" in findings and "'bad'" in findings, findings
    assert translate("word.problem", locale) in findings, findings
    assert run_ids(app_server) == before_states, f"a run was created: {run_ids(app_server) - before_states}"
    assert run_dirs(app_server) == before_dirs, f"a run directory appeared: {run_dirs(app_server) - before_dirs}"


# --- 1. the form follows the run shown ------------------------------------------------------------------------


def newest_run_id(server) -> str:
    states = sorted(server.runs(), key=lambda s: (s.get("created", ""), s.get("id", "")), reverse=True)
    return states[0]["id"]


def assert_form_shows(page, run: dict, editable: bool) -> None:
    wait_for_value(page, "max_steps", str(run["max_steps"]))
    wait_for_value(page, "run_name", run["run_name"])
    for name in ("max_steps", "run_name", "learning_rate", "dataset", "dataset_dir", "preset", "seed"):
        box = field(page, name)
        assert box.is_enabled() is editable, f"{name}: {'disabled' if editable else 'editable'} while the form should be {'editable' if editable else 'read-only'}"


@pytest.mark.timeout(900)
@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_fresh_page_shows_the_last_runs_settings_read_only_until_new_run(app_server, finished_runs, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    run_id = finished_runs["newer"]
    assert newest_run_id(app_server) == run_id, "another run is newer than the fixture's: the file's order was changed"
    page = page_in(browser_locale)

    mode = wait_for_text(page, "#form-mode", run_id)
    assert plain(translate("form.mode_run", locale, run_id=run_id)) in folded(mode), mode
    assert_form_shows(page, NEWER_RUN, editable=False)
    assert page.locator("#new-run").is_visible()
    assert page.locator("#new-run").inner_text().strip() == translate("button.new_run", locale)
    assert wait_for_button(page, "start", enabled=False), "Start is usable while the form shows a finished run read-only"
    assert translate("state.finished", locale) in wait_for_text(page, "#status", run_id)

    page.locator("#new-run").click()
    wait_until_editable(page)
    assert_form_shows(page, NEWER_RUN, editable=True)
    assert wait_for_button(page, "start", enabled=True), "Start is not usable after New run from these settings"
    mode = wait_for_text(page, "#form-mode", plain(translate("form.mode_new_from", locale, run_id=run_id)))
    assert run_id in mode
    page.wait_for_selector("#new-run", state="hidden", timeout=UI_TIMEOUT_MS)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("browser_locale", LOCALES)
def test_opening_a_run_from_the_runs_tab_shows_that_runs_settings(app_server, finished_runs, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    older, newer = finished_runs["older"], finished_runs["newer"]
    page = page_in(browser_locale)
    wait_for_text(page, "#form-mode", newer)  # a fresh page opens on the newest run...
    wait_for_value(page, "max_steps", str(NEWER_RUN["max_steps"]))

    open_tab(page, "tab.runs", locale)  # ...and the Runs tab opens the older one
    try:
        wait_for_text(page, "#runs-table", older, timeout_ms=30_000)
    except PlaywrightTimeout:  # the first visit's refresh did not arrive: a second visit must show it
        open_tab(page, "tab.train", locale)
        open_tab(page, "tab.runs", locale)
        wait_for_text(page, "#runs-table", older)
    pick_dropdown(page, "runs-chosen", older)
    page.wait_for_selector(f"#runs-chosen .token:has-text('{older}')", timeout=UI_TIMEOUT_MS)
    page.locator("#runs-table").click()  # closes the option list
    page.locator("#runs-open").click()

    page.wait_for_function(
        "(name) => [...document.querySelectorAll('[role=tab]')].some(t => t.innerText.trim() === name && t.getAttribute('aria-selected') === 'true')",
        arg=translate("tab.train", locale),
        timeout=UI_TIMEOUT_MS,
    )
    mode = wait_for_text(page, "#form-mode", older)
    assert plain(translate("form.mode_run", locale, run_id=older)) in folded(mode), mode
    assert newer not in mode
    assert_form_shows(page, OLDER_RUN, editable=False)
    assert older in wait_for_text(page, "#status", older)


# --- 3b. buttons while a run trains -----------------------------------------------------------------------------


@pytest.mark.timeout(900)
@pytest.mark.parametrize("browser_locale", LOCALES)
def test_while_a_run_trains_only_stop_is_usable_and_the_form_shows_no_spinner(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    editable_form(page)
    run_name = f"first-hour-long-{locale}"
    fill(page, "max_steps", "2000")  # long enough that it surely still trains when stopped
    fill(page, "run_name", run_name)
    wait_until_idle(page)
    before = run_ids(app_server)
    running = translate("state.running", locale)
    starting = plain(translate("status.starting", locale))
    try:
        page.evaluate(RECORD_START_JS)
        page.locator("#start").click()
        state = wait_until(lambda: next((s for s in app_server.runs() if s["id"] not in before), None), 180, what="the run directory to appear")
        run_id = state["id"]
        wait_for_text(page, "#status", run_id, timeout_ms=120_000)
        status = wait_for_text(page, "#status", running, translate("state.failed", locale), translate("state.finished", locale), timeout_ms=RUN_TIMEOUT_S * 1000)
        record = page.evaluate(STOP_RECORDING_JS)
        assert running in status, status

        # Right after Start, before the run existed: the status said "starting".
        said_starting = [i for i, s in enumerate(record["statuses"]) if starting in folded(s)]
        assert said_starting, f"the status never said {starting!r}: {record['statuses']}"
        shown_run = [i for i, s in enumerate(record["statuses"]) if run_id in s]
        assert not shown_run or said_starting[0] < shown_run[0], f"'starting' came only after the run was shown: {record['statuses']}"
        # While LLaMA-Factory checked the settings: no progress overlay on the form, the run name kept.
        assert record["column"], "the form's column was not found"
        assert record["overlays"] == [], f"the form showed Gradio's progress overlay: {sorted(set(record['overlays']))}"
        assert record["runNames"] == [run_name], f"the run name field changed while starting: {record['runNames']}"
        assert field(page, "run_name").input_value() == run_name

        assert wait_for_button(page, "stop", enabled=True), "Stop is not usable while the run trains"
        assert wait_for_button(page, "start", enabled=False), "Start is usable while a run trains"
        assert running in text_of(page, "#status"), "the run is no longer training: the button check proves nothing"

        page.locator("#stop").click()
        ends = [translate(f"state.{s}", locale) for s in ("stopped", "failed", "finished")]
        status = wait_for_text(page, "#status", *ends, timeout_ms=120_000)
        assert translate("state.stopped", locale) in status, status
        assert wait_for_button(page, "stop", enabled=False), "Stop is still usable after the run stopped"
    finally:
        stop_trainers(app_server)


# --- run a YAML as it is: keys the form lacks are kept, shown and written -----------------------


@pytest.mark.timeout(900)
@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_yaml_runs_as_it_is_and_its_run_shows_every_key(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    run_name = f"as-is-{locale.lower()}"
    text = yaml.safe_dump(
        {
            "model_name_or_path": DEMO["model_path"], "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "template": DEMO["template"], "dataset_dir": DEMO["dataset_dir"], "dataset": DEMO["dataset"], "cutoff_len": 128,
            "max_steps": 2, "logging_steps": 1, "learning_rate": 0.01, "run_name": run_name,
            # Keys the form has no field for: kept in Other keys, written to the run's YAML.
            "neftune_noise_alpha": 5.0, "save_total_limit": 1,
        },
        sort_keys=False,
    )
    before = run_ids(app_server)
    open_tab(page, "tab.import_export", locale)
    set_code(page, "#import-yaml", text)
    page.locator("#run-yaml").click()
    state = wait_until(lambda: next((s for s in app_server.runs() if s["id"] not in before), None), 180, what="the YAML's run to appear")
    assert state["name"] == run_name
    # The Train tab shows the run, its Other keys among its settings (read-only).
    page.wait_for_function("() => !!document.querySelector('#other-keys textarea') && document.querySelector('#other-keys textarea').value.includes('neftune_noise_alpha')", timeout=UI_TIMEOUT_MS)
    assert train_tab_selected(page, locale)
    assert page.locator("#other-keys textarea").is_disabled()
    wait_for_finished(page, state["id"], locale)
    written = yaml.safe_load((app_server.runs_dir / state["id"] / "config.yaml").read_text())
    assert written["neftune_noise_alpha"] == 5.0 and written["save_total_limit"] == 1
    # The run's own config.yaml is on its page.
    page.get_by_text(translate("accordion.run_config", locale)).click()
    page.wait_for_function("() => (document.querySelector('#run-config .cm-content')?.innerText ?? '').includes('neftune_noise_alpha: 5.0')", timeout=UI_TIMEOUT_MS)


# --- the runs table sorts by value ---------------------------------------------------------------

SORTED_DURATIONS = (9, 60, 660)  # as text: "11m 00s" < "1m 00s" < "9s" (and "1 分 00 秒" < "11 分 00 秒" < "9 秒")


@pytest.fixture
def server_with_three_runs(tmp_path):
    """An app over three hand-built finished runs (laid out as LLaMA-Factory writes them, see
    tests/test_resume.py) whose durations sort differently as numbers and as text."""
    import time

    from backend.runs import RunStore
    from tests.test_resume import make_run

    store = RunStore(tmp_path / "runs")
    for logged, seconds in ((13, SORTED_DURATIONS[1]), (5, SORTED_DURATIONS[0]), (20, SORTED_DURATIONS[2])):
        run_id = make_run(store, state="finished", logged=logged)
        store.update(run_id, started_at=1000.0, ended_at=1000.0 + seconds)
        time.sleep(1.05)  # run ids are to the second
    server = AppServer(workdir=tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_runs_table_sorts_durations_as_numbers(server_with_three_runs, chromium, browser_locale) -> None:
    from backend.runs.history import format_duration

    locale = LOCALES[browser_locale]
    context = chromium.new_context(locale=browser_locale, color_scheme="light", viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(f"{server_with_three_runs.url}/?__theme=light")
        page.wait_for_selector("#start", timeout=UI_TIMEOUT_MS)
        page.get_by_role("tab", name=translate("tab.runs", locale)).click()
        header = translate("runs.column.duration", locale)
        column_js = "(header) => [...document.querySelectorAll('#runs-table th')].filter(t => t.getBoundingClientRect().height > 0).findIndex(t => t.innerText.includes(header))"
        page.wait_for_function(f"(header) => ({column_js})(header) >= 0", arg=header, timeout=UI_TIMEOUT_MS)
        column = page.evaluate(column_js, header)
        rates_js = (
            "() => [...document.querySelectorAll('#runs-table tbody tr')].filter(r => r.getBoundingClientRect().height > 0)"
            f".map(r => r.children[{column}]?.innerText.split(/\\s+/).join(' ').trim()).filter(t => t)"
        )
        page.wait_for_function(f"() => ({rates_js})().length >= 3", timeout=UI_TIMEOUT_MS)
        # Gradio's column menu: the header's ⋮ button, then "Sort ascending" (Gradio's own
        # words, in the browser's language). The menu can miss a click made while the table
        # is still being redrawn: opened again until it shows.
        sort_ascending = page.locator("button:visible", has_text=re.compile("Sort ascending|升序排序"))

        def menu_open() -> bool:
            page.evaluate(
                "(header) => [...document.querySelectorAll('#runs-table th')].filter(t => t.getBoundingClientRect().height > 0 && t.innerText.includes(header))[0]"
                ".querySelector('.cell-menu-button').click()",
                header,
            )
            try:
                sort_ascending.first.wait_for(timeout=5_000)
            except PlaywrightTimeout:
                return False
            return True

        wait_until(menu_open, UI_TIMEOUT_MS / 1000, interval=0.5, what="the column menu to open")
        sort_ascending.first.click()
        expected = [format_duration(seconds, locale) for seconds in SORTED_DURATIONS]
        page.wait_for_function(f"(expected) => JSON.stringify(({rates_js})().slice(-3)) === JSON.stringify(expected)", arg=expected, timeout=UI_TIMEOUT_MS)
    finally:
        context.close()
