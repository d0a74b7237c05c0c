"""Your own data, in headless Chromium: upload a file or name one on this machine, see it,
see its token lengths against the cutoff, register it, and train the demo model on it to a
downloaded adapter; hold some out and see the eval loss on the chart.

One app server for the module, started with `--data-root` on a temporary folder (the server
path test registers a file there). Runs are real LLaMA-Factory runs of the offline CPU demo
model, a few steps each. Every word is looked up with `translate()`.
"""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from backend.demo import DATASET_FILE, demo_paths
from backend.i18n import translate
from tests.harness import AppServer, wait_until
from tests.test_browser_app import (
    RUN_TIMEOUT_S,
    UI_TIMEOUT_MS,
    fill,
    folded,
    plain,
    run_ids,
    shoot,
    text_of,
    wait_for_new_run,
    wait_for_text,
    wait_until_idle,
)

pytestmark = pytest.mark.browser

TRAIN_STEPS = "4"


def demo_rows() -> list[dict]:
    return json.loads((demo_paths().dataset_dir / DATASET_FILE).read_text(encoding="utf-8"))


def write_sharegpt_jsonl(path: Path, rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            human = (row["instruction"] + "\n" + row["input"]).strip()
            out.write(json.dumps({"conversations": [{"from": "human", "value": human}, {"from": "gpt", "value": row["output"]}]}) + "\n")
    return path


def write_alpaca_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["instruction", "input", "output"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row[k] for k in ("instruction", "input", "output")})
    return path


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("server-data")


@pytest.fixture(scope="module")
def app_server(demo_assets, tmp_path_factory, data_root):
    server = AppServer("--data-root", str(data_root), workdir=tmp_path_factory.mktemp("data-app")).start()
    try:
        yield server
    finally:
        server.stop()


def loss_chart_traces(page) -> list[str]:
    return page.evaluate("() => (document.querySelector('#loss-chart .js-plotly-plot')?.data || []).map(t => t.name)")


def open_data_tab(page, locale: str = "en") -> None:
    page.get_by_role("tab", name=translate("tab.data", locale)).click()
    page.wait_for_selector("#data-add", timeout=UI_TIMEOUT_MS)


def registry(app_server) -> dict:
    info = app_server.runs_dir / "datasets" / "dataset_info.json"
    return json.loads(info.read_text(encoding="utf-8")) if info.exists() else {}


def preview_rows(page) -> int:
    return page.locator("#data-preview tbody tr").count()


def wait_for_histogram(page) -> dict:
    """The length histogram's traces once drawn: their names and the cutoff line's x."""
    page.wait_for_function(
        "() => { const p = document.querySelector('#data-lengths .js-plotly-plot'); return !!p && !!p.data && p.data.length > 0; }",
        timeout=UI_TIMEOUT_MS * 3,
        polling=500,
    )
    return page.evaluate(
        "() => { const p = document.querySelector('#data-lengths .js-plotly-plot');"
        " return {traces: p.data.length, shapes: (p.layout.shapes || []).map(s => s.x0), annotations: (p.layout.annotations || []).map(a => a.text)}; }"
    )


def add_and_measure(page, name: str) -> None:
    fill(page, "data-name", name)
    page.locator("#data-add").click()
    wait_for_text(page, "#data-added", name)
    assert translate("datatab.added", "en", name="", folder="").split(":")[0] in text_of(page, "#data-added")


def train_on_it(page, app_server, run_name: str, tmp_path: Path, extra: dict[str, str] | None = None) -> tuple[str, set[str]]:
    """Train on it → a new run on the Train tab; a few steps to the end; the adapter downloaded."""
    page.locator("#data-use").click()
    page.wait_for_function("() => !document.querySelector('#run-name input, #run-name textarea').disabled", timeout=UI_TIMEOUT_MS, polling=200)
    fill(page, "run-name", run_name)
    fill(page, "max-steps", TRAIN_STEPS)
    for field_id, value in (extra or {}).items():
        fill(page, field_id, value)
    wait_until_idle(page)
    before = run_ids(app_server)
    page.locator("#start").click()
    run_id = wait_for_new_run(app_server, before)["id"]
    status = wait_for_text(page, "#status", "Status: finished", "Status: failed", "Status: stopped", timeout_ms=RUN_TIMEOUT_S * 1000)
    assert "Status: finished" in status, status + "\n" + (app_server.runs_dir / run_id / "train.log").read_text(errors="replace")[-3000:]
    page.wait_for_function("() => !document.querySelector('#download').disabled", timeout=UI_TIMEOUT_MS)
    with page.expect_download(timeout=UI_TIMEOUT_MS) as download_info:
        page.locator("#download").click()
    archive = tmp_path / f"{run_name}.zip"
    download_info.value.save_as(archive)
    with zipfile.ZipFile(archive) as bundle:
        names = set(bundle.namelist())
    assert {"adapter_model.safetensors", "adapter_config.json"} <= names
    return run_id, names


@pytest.mark.parametrize(
    "kind, layout_word, writer",
    [("jsonl-sharegpt", "sharegpt", write_sharegpt_jsonl), ("csv-alpaca", "alpaca", write_alpaca_csv)],
)
def test_an_uploaded_dataset_is_previewed_measured_and_trained_to_an_adapter(app_server, page_of, tmp_path: Path, kind, layout_word, writer) -> None:
    rows = demo_rows()[:60]
    suffix = ".jsonl" if kind.startswith("jsonl") else ".csv"
    upload = writer(tmp_path / f"my-{kind}{suffix}", rows)
    page = page_of()
    open_data_tab(page)
    page.locator("#data-upload input[type=file]").set_input_files(str(upload))

    # See it: the file, its rows, its layout in words, the first rows in a table.
    summary = wait_for_text(page, "#data-summary", "60")
    assert upload.name in summary and translate(f"datatab.layout.{layout_word}", "en") in summary
    page.wait_for_function("() => document.querySelectorAll('#data-preview tbody tr').length > 0", timeout=UI_TIMEOUT_MS)
    assert 0 < preview_rows(page) <= 20
    assert text_of(page, "#data-findings").strip() == ""  # nothing wrong with it
    assert page.locator("#data-name input, #data-name textarea").first.input_value() == f"my-{kind}"

    name = f"mine-{kind}"
    add_and_measure(page, name)
    entry = registry(app_server)[name]
    assert entry["formatting"] == ("sharegpt" if layout_word == "sharegpt" else "alpaca")
    stored = app_server.runs_dir / "datasets" / entry["file_name"]
    assert stored.is_file() and stored.read_bytes() == upload.read_bytes()  # a copy in RocBoard's own folder

    # Its token lengths, with the form's cutoff drawn, and one example as the trainer sees it.
    histogram = wait_for_histogram(page)
    assert histogram["traces"] >= 1 and histogram["shapes"], histogram
    lengths = wait_for_text(page, "#data-lengths-summary", "60")
    assert "%" in lengths
    assert page.locator("#data-example mark.rb-trained").count() >= 1
    assert rows[0]["output"][:10] in page.locator("#data-example mark.rb-trained").first.inner_text() or page.locator("#data-example").inner_text()
    shoot(page, f"data-{kind}")

    run_id, _ = train_on_it(page, app_server, f"data-{kind}", tmp_path)
    config = (app_server.runs_dir / run_id / "config.yaml").read_text(encoding="utf-8")
    assert f"dataset: {name}" in config and str(app_server.runs_dir / "datasets") in config


def test_a_file_on_the_server_is_registered_where_it_is(app_server, page_of, data_root: Path) -> None:
    data_file = write_sharegpt_jsonl(data_root / "server side.jsonl", demo_rows()[:30])
    outside = write_sharegpt_jsonl(Path(app_server.workdir) / "outside.jsonl", demo_rows()[:5])
    page = page_of()
    open_data_tab(page)
    page.get_by_role("tab", name=translate("datatab.tab_path", "en")).click()

    # Outside the allowed folders: refused, with the fix, and nothing registered.
    fill(page, "data-path", str(outside))
    page.locator("#data-read").click()
    refused = wait_for_text(page, "#data-findings", "--data-root")
    assert "outside.jsonl" in refused
    before = dict(registry(app_server))

    fill(page, "data-path", str(data_file))
    page.locator("#data-read").click()
    wait_for_text(page, "#data-summary", "30")
    assert text_of(page, "#data-findings").strip() == ""
    add_and_measure(page, "server-side")
    entry = registry(app_server)["server-side"]
    assert Path(entry["file_name"]) == data_file.resolve()  # used where it is, not copied
    assert set(registry(app_server)) - set(before) == {"server-side"}

    # The Train form offers it: picking it fills the folder and the name.
    page.get_by_role("tab", name=translate("tab.train", "en")).click()
    page.locator("#new-run").click() if page.locator("#new-run").is_visible() else None
    page.locator("#dataset-pick").click()
    page.get_by_role("option", name="server-side").click()
    wait_until(lambda: page.locator("#dataset input, #dataset textarea").first.input_value() == "server-side", 30, what="the dataset field to be filled")
    assert page.locator("#dataset-dir input, #dataset-dir textarea").first.input_value() == str(app_server.runs_dir.resolve() / "datasets")


def test_bad_data_is_refused_in_the_pages_language_and_leaves_nothing(app_server, page_of, tmp_path: Path) -> None:
    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"conversations": []}\n{"conversations": [\n', encoding="utf-8")
    page = page_of("zh-CN")
    open_data_tab(page, "zh-CN")
    before = dict(registry(app_server))
    page.locator("#data-upload input[type=file]").set_input_files(str(bad))
    findings = wait_for_text(page, "#data-findings", "broken.jsonl")
    assert "2" in findings  # the line
    assert any("\u4e00" <= ch <= "\u9fff" for ch in findings)  # in Chinese
    fill(page, "data-name", "broken")
    page.locator("#data-add").click()
    wait_for_text(page, "#data-added", "broken.jsonl")
    assert registry(app_server) == before
    assert not list((app_server.runs_dir / "datasets" / "files").glob("broken*")) if (app_server.runs_dir / "datasets" / "files").exists() else True


def test_a_validation_split_draws_the_eval_loss_beside_the_training_loss(app_server, page_of, tmp_path: Path) -> None:
    page = page_of()
    fill(page, "run-name", "with-eval")
    fill(page, "max-steps", "6")
    fill(page, "val-size", "0.1")
    page.locator("#eval-strategy input").first.click()
    page.get_by_role("option", name="steps", exact=True).click()
    fill(page, "eval-steps", "3")
    wait_until_idle(page)
    before = run_ids(app_server)
    page.locator("#start").click()
    run_id = wait_for_new_run(app_server, before)["id"]
    status = wait_for_text(page, "#status", "Status: finished", "Status: failed", "Status: stopped", timeout_ms=RUN_TIMEOUT_S * 1000)
    assert "Status: finished" in status, status
    eval_name = translate("chart.eval_loss", "en")
    page.wait_for_function(
        "(name) => { const p = document.querySelector('#loss-chart .js-plotly-plot'); return !!p && (p.data || []).some(t => t.name === name && (t.y || []).length >= 1); }",
        arg=eval_name,
        timeout=UI_TIMEOUT_MS,
    )
    traces = loss_chart_traces(page)
    assert eval_name in traces and translate("chart.loss_series", "en") in traces
    log = (app_server.runs_dir / run_id / "output" / "trainer_log.jsonl").read_text(encoding="utf-8")
    assert "eval_loss" in log


# --- issue 27: a first hour on the Data tab without a surprise -----------------------------------






def problem_of(rule: str, locale: str = "en", **params: str) -> str:
    """The problem a finding of `rule` states, as the page shows it (its first sentence is
    enough to recognise it)."""
    return plain(translate(f"check.{rule}.problem", locale, **params))


def gradio_errors(page) -> list[str]:
    """Gradio's error toasts and the red "Error" badges it puts on the components of an event
    that failed: what a person sees when an event raised."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.toast-body, .wrap .error')]
            .filter(e => e.getClientRects().length > 0).map(e => e.innerText.split(/\\s+/).join(' ').trim())"""
    )


def settled(page) -> None:
    """Until the page's events are done: no pending overlay, or Gradio showed an error."""
    page.wait_for_function(
        """() => document.querySelectorAll('.wrap.default.full:not(.hide)').length === 0
            || [...document.querySelectorAll('.toast-body, .wrap .error')].some(e => e.getClientRects().length > 0)""",
        timeout=UI_TIMEOUT_MS,
        polling=200,
    )


def upload(page, path: Path) -> None:
    """Uploads `path` in the Data tab (the file shown before is cleared first, with the upload
    area's own clear button) and waits until the tab shows it."""
    chooser = page.locator("#data-upload input[type=file]")
    page.wait_for_selector("#data-upload input[type=file], #data-upload button[aria-label='Clear']", state="attached", timeout=UI_TIMEOUT_MS)
    if chooser.count() == 0:
        page.locator("#data-upload button[aria-label='Clear']").first.click()
        chooser.first.wait_for(state="attached", timeout=UI_TIMEOUT_MS)
        settled(page)
    chooser.first.set_input_files(str(path))
    wait_for_text(page, "#data-summary", path.name)


def dropdown_value(page, element_id: str) -> str:
    return page.locator(f"#{element_id} input").first.input_value()


def histogram_drawn(page) -> bool:
    return page.evaluate("() => { const p = document.querySelector('#data-lengths .js-plotly-plot'); return !!p && !!p.data && p.data.length > 0; }")


def test_add_and_train_on_it_with_nothing_chosen_say_so_and_nothing_fails(app_server, page_of) -> None:
    page = page_of()
    open_data_tab(page)
    before = dict(registry(app_server))
    page.locator("#data-add").click()
    added = wait_for_text(page, "#data-added", problem_of("data-nothing-chosen"))
    settled(page)
    assert gradio_errors(page) == [], f"Add with no file chose raised in Gradio; the page said {added!r}"

    page.locator("#data-use").click()
    said = wait_for_text(page, "#data-lengths-findings", problem_of("data-none-picked"))
    settled(page)
    assert gradio_errors(page) == [], f"Train on it with no dataset raised in Gradio; the page said {said!r}"
    assert page.get_by_role("tab", name=translate("tab.data", "en")).get_attribute("aria-selected") == "true", "Train on it left the Data tab with nothing to train on"
    assert registry(app_server) == before


def test_train_on_it_opens_a_new_run_named_after_the_dataset_with_the_presets_defaults(app_server, page_of, tmp_path: Path) -> None:
    from backend.config.presets import load_presets
    from backend.service import demo_form

    preset = load_presets()[0][demo_form()["preset"]]
    page = page_of()
    # What the form held before: another run's name and accumulation.
    fill(page, "run-name", "the-previous-run")
    fill(page, "grad-accum", str(preset.value("grad_accum") + 3))
    wait_until_idle(page)

    open_data_tab(page)
    upload(page, write_alpaca_csv(tmp_path / "fresh-for-training.csv", demo_rows()[:20]))
    name = "fresh-for-training"
    add_and_measure(page, name)
    assert dropdown_value(page, "data-registered") == name
    page.locator("#data-use").click()
    page.wait_for_function(
        "(name) => document.querySelector('[role=tab][aria-selected=true]')?.innerText.trim() === name", arg=translate("tab.train", "en"), timeout=UI_TIMEOUT_MS
    )
    page.wait_for_function(
        "(name) => document.querySelector('#dataset input, #dataset textarea')?.value === name", arg=name, timeout=UI_TIMEOUT_MS
    )
    wait_until_idle(page)
    run_name = page.locator("#run-name input, #run-name textarea").first.input_value()
    assert run_name == name, f"the new run is called {run_name!r}, not after its dataset"
    assert page.locator("#grad-accum input").first.input_value() == str(preset.value("grad_accum")), "the accumulation is the previous form's, not the preset's"
    assert dropdown_value(page, "dataset-pick") == name, "Or pick one of your datasets is empty although the form trains on it"
    assert page.locator("#dataset-dir input, #dataset-dir textarea").first.input_value() == str(app_server.runs_dir.resolve() / "datasets")


def test_another_file_clears_the_lengths_and_a_file_added_before_is_named_not_added_again(app_server, page_of, tmp_path: Path) -> None:
    rows = demo_rows()
    first = write_alpaca_csv(tmp_path / "added-once.csv", rows[:25])
    other = write_sharegpt_jsonl(tmp_path / "another-file.jsonl", rows[25:40])
    page = page_of()
    open_data_tab(page)
    upload(page, first)
    add_and_measure(page, "added-once")
    wait_for_histogram(page)
    wait_for_text(page, "#data-lengths-summary", "25")

    # Another file: the lengths shown were the first dataset's, and they go.
    upload(page, other)
    try:
        page.wait_for_function(
            "() => { const p = document.querySelector('#data-lengths .js-plotly-plot'); return !(p && p.data && p.data.length); }", timeout=UI_TIMEOUT_MS
        )
    except PlaywrightTimeout:
        pass
    assert not histogram_drawn(page), "the first dataset's histogram stays while another file is shown"
    assert text_of(page, "#data-lengths-summary").strip() == ""
    assert page.locator("#data-example mark").count() == 0

    # The same bytes again, under another file name: the page names the dataset it already is.
    again = tmp_path / "copy of added-once.csv"
    again.write_bytes(first.read_bytes())
    before = dict(registry(app_server))
    upload(page, again)
    already = plain(translate("datatab.already_added", "en", name="added-once"))
    wait_for_text(page, "#data-added", already.split("added-once")[0].strip())
    assert "added-once" in text_of(page, "#data-added")
    assert dropdown_value(page, "data-registered") == "added-once", "the dataset it already is is not offered to use"
    page.locator("#data-add").click()
    refused = wait_for_text(page, "#data-added", problem_of("data-already-added", name="added-once").split("added-once")[0].strip())
    settled(page)
    assert registry(app_server) == before, f"added again: {set(registry(app_server)) - set(before)}; the page said {refused!r}"
    assert gradio_errors(page) == []


def test_the_preview_says_nothing_is_there_yet_instead_of_numbered_headers(app_server, page_of, tmp_path: Path) -> None:
    page = page_of()
    open_data_tab(page)
    headers = page.evaluate("() => [...document.querySelectorAll('#data-preview th')].filter(t => t.getClientRects().length > 0).map(t => t.innerText.trim())")
    assert not {"1", "2", "3"} & set(headers), f"an empty preview shows placeholder headers {headers}"
    assert plain(translate("datatab.preview_empty", "en")) in folded(text_of(page, "#data-preview-empty"))

    upload(page, write_alpaca_csv(tmp_path / "with-headers.csv", demo_rows()[:5]))
    page.wait_for_function("() => document.querySelectorAll('#data-preview tbody tr').length > 0", timeout=UI_TIMEOUT_MS)
    headers = page.evaluate("() => [...document.querySelectorAll('#data-preview th')].filter(t => t.getClientRects().length > 0).map(t => t.innerText.trim())")
    assert {"instruction", "input", "output"} <= set(headers), headers
    assert not page.locator("#data-preview-empty").is_visible()


def switch_language(page, locale: str) -> None:
    page.locator("#language label", has_text="中文" if locale == "zh-CN" else "English").click()
    page.wait_for_function(
        "(name) => [...document.querySelectorAll('[role=tab]')].some(t => t.innerText.trim() === name)", arg=translate("tab.data", locale), timeout=UI_TIMEOUT_MS
    )
    wait_until_idle(page)


def layout_labels(page) -> list[str]:
    return page.evaluate("() => [...document.querySelectorAll('#data-layout label')].map(l => l.innerText.trim())")


@pytest.mark.parametrize("browser_locale, page_locale", [("zh-CN", "zh-CN"), ("en-US", "zh-CN"), ("zh-CN", "en")])
def test_the_layouts_are_named_in_the_pages_language(app_server, page_of, browser_locale, page_locale) -> None:
    from backend.data.layout import LAYOUTS

    page = page_of(browser_locale)
    if not browser_locale.startswith(page_locale[:2]):
        switch_language(page, page_locale)
    open_data_tab(page, page_locale)
    expected = [translate(f"datatab.layout.{name}", page_locale) for name in LAYOUTS]
    try:
        page.wait_for_function(
            "(expected) => JSON.stringify([...document.querySelectorAll('#data-layout label')].map(l => l.innerText.trim())) === JSON.stringify(expected)",
            arg=expected,
            timeout=UI_TIMEOUT_MS,
        )
    except PlaywrightTimeout:
        pass
    assert layout_labels(page) == expected


def upload_area_text(page) -> str:
    return folded(page.locator("#data-upload").inner_text())


@pytest.mark.parametrize("browser_locale, page_locale", [("en-US", "zh-CN"), ("zh-CN", "en")])
def test_gradios_own_upload_words_follow_the_language_switch(app_server, page_of, browser_locale, page_locale) -> None:
    """What a browser in the page's language shows in the upload area (Gradio's own words,
    "Drop File Here - or - Click to Upload", in Gradio's translation) is what a page switched
    to that language shows."""
    native = page_of("zh-CN" if page_locale == "zh-CN" else "en-US")
    open_data_tab(native, page_locale)
    expected = upload_area_text(native)
    assert expected, "the upload area shows no words"

    page = page_of(browser_locale)
    open_data_tab(page, "zh-CN" if browser_locale == "zh-CN" else "en")
    assert upload_area_text(page) != expected, "both browsers show the same words before the switch: the test proves nothing"
    switch_language(page, page_locale)
    open_data_tab(page, page_locale)
    try:
        page.wait_for_function(
            "(expected) => document.querySelector('#data-upload').innerText.split(/\\s+/).join(' ').trim() === expected", arg=expected, timeout=UI_TIMEOUT_MS
        )
    except PlaywrightTimeout:
        pass
    assert upload_area_text(page) == expected
