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

from backend.demo import DATASET_FILE, demo_paths
from backend.i18n import translate
from tests.harness import AppServer, wait_until
from tests.test_browser_app import (
    RUN_TIMEOUT_S,
    UI_TIMEOUT_MS,
    fill,
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
