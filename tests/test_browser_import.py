"""The Import tab in headless Chromium, in English and in Chinese: the preset a YAML is
checked against is on the tab (and can be picked there), "Apply fixes" writes what each
finding says (and keeps the comment of a fixed line), and "Load into the form" reports what
it did in a few lines that follow a language switch.

One app server for the module and no training run: nothing here starts one. Every word is
looked up with `translate()` or rendered by the backend for the same YAML and preset; tests
wait for states, never for a time.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from backend.config.presets import load_presets
from backend.config.yaml_import import form_load, import_yaml
from backend.i18n import translate
from backend.service import demo_form
from tests.harness import AppServer
from tests.test_browser_first_hour import (
    LOCALES,
    UI_TIMEOUT_MS,
    code_text,
    editable_form,
    folded,
    open_tab,
    plain,
    set_code,
    text_of,
    train_tab_selected,
    wait_for_text,
)

pytestmark = pytest.mark.browser

PRESETS, _ = load_presets()
DEMO = demo_form()
OTHER_LOCALE = {"en": "zh-CN", "zh-CN": "en"}
LANGUAGE_LABEL = {"en": "English", "zh-CN": "中文"}


@pytest.fixture(scope="module")
def app_server(demo_assets, tmp_path_factory):
    server = AppServer(workdir=tmp_path_factory.mktemp("import-app")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def page_in(new_tab, app_server):
    """A tab on the module's app in the browser's language, its form editable; closed after."""

    def opener(browser_locale: str):
        page = new_tab(browser_locale)
        page.goto(f"{app_server.url}/?__theme=light")
        page.wait_for_selector("#start", timeout=UI_TIMEOUT_MS)
        page.wait_for_function(
            "(text) => document.querySelector('#start').innerText.trim() === text", arg=translate("button.start", LOCALES[browser_locale]), timeout=UI_TIMEOUT_MS
        )
        editable_form(page)
        return page

    return opener


# --- helpers -----------------------------------------------------------------------------------------


def paste(page, text: str) -> None:
    set_code(page, "#import-yaml", text)
    last = text.strip().splitlines()[-1]
    page.wait_for_function("(line) => (document.querySelector('#import-yaml .cm-content')?.innerText ?? '').includes(line)", arg=last, timeout=UI_TIMEOUT_MS)


def import_preset_shown(page) -> str:
    return page.locator("#import-preset input").input_value()


def pick_import_preset(page, name: str) -> None:
    page.locator("#import-preset input").click()
    page.locator("#import-preset ul.options li", has_text=name).first.click()
    page.wait_for_function("(name) => document.querySelector('#import-preset input')?.value === name", arg=name, timeout=UI_TIMEOUT_MS)


def fix_words(text: str, preset_id: str, key: str, locale: str) -> str:
    """The fix the page shows for `key` of `text` on the preset, as a person reads it."""
    (finding,) = [f for f in import_yaml(text, PRESETS[preset_id]).findings if f.key == key]
    return plain(finding.text(locale)[1])


def switch_language(page, locale: str) -> None:
    page.locator("#language label", has_text=LANGUAGE_LABEL[locale]).click()
    page.wait_for_function("(text) => document.querySelector('#start').innerText.trim() === text", arg=translate("button.start", locale), timeout=UI_TIMEOUT_MS)


def checked_radio(page, element_id: str) -> str:
    return page.evaluate("(id) => document.querySelector(`#${id} input:checked`)?.value ?? ''", element_id)


# --- item 3: the preset is shown, picked, and the fix writes what the finding says -----------------------


def bf16_yaml() -> str:
    return (
        "# from a CUDA guide\n"
        f"model_name_or_path: {DEMO['model_path']}\n"
        "stage: sft\n"
        "do_train: true\n"
        "finetuning_type: lora\n"
        "dataset: demo\n"
        f"dataset_dir: {DEMO['dataset_dir']}\n"
        "template: llama3\n"
        "compute_type: bf16  # use bfloat16\n"
        "max_steps: 3\n"
    )


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_apply_fixes_writes_what_the_finding_says_on_the_preset_the_tab_shows(app_server, page_in, browser_locale, tmp_path: Path) -> None:
    from backend.check_cli import main as check_main

    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    open_tab(page, "tab.import_export", locale)
    # The tab says which preset it checks against: the Train form's (the CPU demo here).
    # (In the page's language once the load event has relabelled the page.)
    cpu_demo = PRESETS[DEMO["preset"]].name(locale)
    page.wait_for_function("(name) => document.querySelector('#import-preset input')?.value === name", arg=cpu_demo, timeout=UI_TIMEOUT_MS)
    assert import_preset_shown(page) == cpu_demo

    text = bf16_yaml()
    paste(page, text)
    page.locator("#import-button").click()
    on_cpu = fix_words(text, DEMO["preset"], "compute_type", locale)
    wait_for_text(page, "#import-findings", on_cpu)  # no bf16 on the CPU: it says fp32

    # Picked here, another preset judges the YAML again at once, and its fix says bf16.
    mi300x = PRESETS["mi300x"].name(locale)
    pick_import_preset(page, mi300x)
    on_mi300x = fix_words(text, "mi300x", "compute_type", locale)
    assert "bf16: true" in on_mi300x
    wait_for_text(page, "#import-findings", on_mi300x)

    page.locator("#apply-fixes").click()
    page.wait_for_function("() => !document.querySelector('#import-yaml .cm-content').innerText.includes('compute_type')", timeout=UI_TIMEOUT_MS)
    fixed = code_text(page, "#import-yaml")
    # What the finding said, on the line it fixed, its comment kept.
    assert "bf16: true  # use bfloat16" in fixed.splitlines(), fixed
    # ... and what `app.py check --preset mi300x --fix` writes.
    source, target = tmp_path / "train.yaml", tmp_path / "train.fixed.yaml"
    source.write_text(text, encoding="utf-8")
    out = io.StringIO()
    check_main([str(source), "--preset", "mi300x", "--fix", "--no-llamafactory", "--output", str(target)], out=out)
    assert fixed.rstrip() == target.read_text(encoding="utf-8").rstrip(), f"the page:\n{fixed}\n--- app.py check --fix:\n{target.read_text()}"
    assert "checked against the preset mi300x" in out.getvalue()

    # Loaded, the form gets the preset the YAML was checked against, and bf16 with it.
    page.locator("#load-into-form").click()
    wait_for_text(page, "#form-notice", mi300x)
    assert train_tab_selected(page, locale)
    page.wait_for_function("(name) => document.querySelector('#preset input')?.value === name", arg=mi300x, timeout=UI_TIMEOUT_MS)
    page.wait_for_function("() => document.querySelector('#precision input:checked')?.value === 'bf16'", timeout=UI_TIMEOUT_MS)
    assert checked_radio(page, "precision") == "bf16"


# --- item 12: a short summary, in the page's language, again after a switch ---------------------------


def summary_yaml() -> str:
    return (
        f"model_name_or_path: {DEMO['model_path']}\n"
        "stage: sft\n"
        "do_train: true\n"
        "finetuning_type: lora\n"
        "dataset: demo\n"
        f"dataset_dir: {DEMO['dataset_dir']}\n"
        "template: llama3\n"
        "num_train_epochs: 2.0\n"
        "neftune_noise_alpha: 5\n"
        "max_grad_norm: 0.5\n"
    )


def words_before_count(key: str, locale: str) -> str:
    """A summary title's words, without its count ("From the YAML" of "From the YAML ({count}):")."""
    return plain(re.split(r"\s*[（(]\{count\}", translate(key, locale))[0])


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_load_summary_is_short_and_speaks_the_pages_language_after_a_switch(app_server, page_in, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_in(browser_locale)
    open_tab(page, "tab.import_export", locale)
    text = summary_yaml()
    paste(page, text)
    page.locator("#load-into-form").click()
    load = form_load(import_yaml(text, PRESETS[DEMO["preset"]]), {}, DEMO)

    for shown_in in (locale, OTHER_LOCALE[locale]):
        if shown_in != locale:
            switch_language(page, shown_in)
        notice = wait_for_text(page, "#form-notice", words_before_count("import.loaded_set", shown_in))
        seen = folded(notice)
        # The counts, the preset, what the YAML set, the Other keys by name: a few lines.
        assert PRESETS[DEMO["preset"]].name(shown_in) in seen, seen
        assert plain(translate("import.loaded_set", shown_in, count=len(load.set_fields) - 1)) in seen, seen
        assert plain(translate("import.loaded_other", shown_in, count=2)) in seen and "neftune_noise_alpha" in seen and "max_grad_norm" in seen, seen
        epochs = re.split(r"\s*[（(]", translate("label.num_train_epochs", shown_in))[0]
        assert f"{epochs} 2.0" in seen, seen
        # The fields reset to the preset's defaults are folded away: their titles show, not them.
        assert page.locator("#form-notice details").count() == 2
        assert page.locator("#form-notice details[open]").count() == 0
        assert words_before_count("import.loaded_reset", shown_in) in seen, seen
        lora_dropout = re.split(r"\s*[（(]", translate("label.lora_dropout", shown_in))[0]
        assert lora_dropout not in seen, seen
        assert len(seen) < 600, f"{len(seen)} characters: {seen}"
        # Nothing of the other language is left in it.
        gone = OTHER_LOCALE[shown_in]
        assert words_before_count("import.loaded_set", gone) not in seen, seen
        assert words_before_count("import.loaded_reset", gone) not in seen, seen
        if shown_in == "zh-CN":
            for word in ("Loaded into the form", "From the YAML", "Epochs", "Other keys"):
                assert word not in seen, (word, seen)

    # Unfolded, the reset fields are there with their values (Max steps back to 0).
    page.locator("#form-notice details summary").first.click()
    opened = folded(text_of(page, "#form-notice"))
    max_steps = re.split(r"\s*[（(]", translate("label.max_steps", OTHER_LOCALE[locale]))[0]
    assert f"{max_steps} 0" in opened, opened
    # The Import tab's own panel (what the load found) followed the switch too.
    open_tab(page, "tab.import_export", OTHER_LOCALE[locale])
    panel = folded(text_of(page, "#import-findings"))
    found = import_yaml(text, PRESETS[DEMO["preset"]]).findings
    if found:
        assert plain(found[0].text(OTHER_LOCALE[locale])[0]) in panel and plain(found[0].text(locale)[0]) not in panel, panel
    else:
        assert plain(translate("import.clean", OTHER_LOCALE[locale])) in panel and plain(translate("import.clean", locale)) not in panel, panel
