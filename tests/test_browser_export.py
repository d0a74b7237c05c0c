"""The Export tab in headless Chromium: a trained demo run merged into its base model and written
to a folder (GGUF too when llama.cpp's converter is installed), the merged model offered for
download, an existing folder refused until the replace box is ticked (and, when it holds files
no export wrote, until its name is typed), and a refusal in Chinese. What a person new to it is
promised: the progress counts toward the size the plan showed, never past it as if it were
progress; a refusal is said once; the tab opens on the latest run, its adapters named in the
page's language.

One app server for the module, started with `--export-root` on a temporary folder and a copy
of the session's trained demo run in its runs dir. The last test adds a newer run (a copy under
another id): it runs last (pytest keeps the file's order). Every word is looked up with
`translate()`.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from backend.export import gguf_convert, merge, size
from backend.i18n import translate
from backend.runs import RunStore
from tests.harness import AppServer, copy_run
from tests.test_browser_app import UI_TIMEOUT_MS, fill, shoot, text_of, wait_for_text

pytestmark = pytest.mark.browser

EXPORT_TIMEOUT_MS = 240_000
LOCALES = {"en-US": "en", "zh-CN": "zh-CN"}

# Every text the status shows from the click on, however briefly (the export of the demo model
# takes seconds): a state seen once is kept.
RECORD_STATUS_JS = """() => {
    const record = [];
    const look = () => {
        const text = document.querySelector('#export-status')?.innerText ?? '';
        if (record[record.length - 1] !== text) record.push(text);
    };
    look();
    window.__exportObserver = new MutationObserver(look);
    window.__exportObserver.observe(document.body, {subtree: true, childList: true, characterData: true});
    window.__exportRecord = record;
}"""
STOP_RECORDING_JS = "() => { window.__exportObserver?.disconnect(); return window.__exportRecord; }"


@pytest.fixture(scope="module")
def export_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("export-root")


@pytest.fixture(scope="module")
def app_server(demo_assets, trained_demo_run, tmp_path_factory, export_root):
    workdir = tmp_path_factory.mktemp("export-app")
    source_runs, run_id = trained_demo_run
    copy_run(source_runs, run_id, workdir / "runs")
    server = AppServer("--export-root", str(export_root), workdir=workdir).start()
    server.run_id = run_id
    server.runs_dir = workdir / "runs"
    try:
        yield server
    finally:
        server.stop()


def open_export_tab(page, locale: str = "en") -> None:
    """Opens the tab and waits for its visit's refresh: a run chosen (with its folder)."""
    page.get_by_role("tab", name=translate("tab.export", locale)).click()
    page.wait_for_selector("#export-start", timeout=UI_TIMEOUT_MS)
    page.wait_for_function("() => (document.querySelector('#export-run input')?.value ?? '') !== ''", timeout=UI_TIMEOUT_MS, polling=250)


def export_and_wait(page, locale: str = "en") -> str:
    """Clicks Export; waits for the export's end (a status unlike the one before the click)."""
    before = text_of(page, "#export-status")
    page.locator("#export-start").click()
    ends = [translate("export.phase.done", locale), translate("export.phase.failed", locale), translate("word.problem", locale)]
    page.wait_for_function(
        "([before, ends]) => { const t = document.querySelector('#export-status').innerText; return t !== before && ends.some(e => t.includes(e)); }",
        arg=[before, ends],
        timeout=EXPORT_TIMEOUT_MS,
        polling=500,
    )
    return text_of(page, "#export-status")


def test_export_tab_writes_the_merged_model_and_offers_it(app_server, page_of, export_root: Path) -> None:
    page = page_of()
    open_export_tab(page)
    assert page.locator("#export-run input").input_value() == app_server.run_id
    target = export_root / "merged"
    fill(page, "export-dir", str(target))
    has_converter = gguf_convert.find_converter() is not None
    if has_converter:
        page.locator("#export-gguf").get_by_text(translate("export.gguf_f16", "en"), exact=True).click()
    else:
        assert translate("export.gguf_missing", "en")[:40] in text_of(page, "#export-gguf-missing")
    # The plan line follows the GGUF choice: wait for the figure this very request plans (read
    # too early, it is still the figure without GGUF).
    request = merge.ExportRequest(run_id=app_server.run_id, target=str(target), gguf="f16" if has_converter else "none")
    expected_plan, problems = merge.plan_export(RunStore(app_server.runs_dir), request, [export_root])
    assert expected_plan is not None, problems
    planned = size.size_text(expected_plan.needed_disk)
    wait_for_text(page, "#export-plan", f"Size needed: about {planned} ")
    page.evaluate(RECORD_STATUS_JS)
    status = export_and_wait(page)
    seen = page.evaluate(STOP_RECORDING_JS)
    assert translate("export.phase.done", "en") in status, status
    shoot(page, "export-done")
    # While it ran, the progress counted toward the size the plan showed, and never showed more
    # written than that as if it were progress.
    progress = [match for text in seen for match in re.findall(r"Written so far: ([\d.]+ [KMG]?i?B) of about ([\d.]+ [KMG]?i?B)", text)]
    assert progress, f"no progress line while the export ran: {seen}"
    assert {expected for _, expected in progress} == {planned}, (planned, progress)
    assert all(size_bytes(written) <= size_bytes(expected) for written, expected in progress), progress
    names = {path.name for path in target.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "Modelfile"} <= names
    if has_converter:
        assert "merged-f16.gguf" in names and "tensors" in status
    else:
        pytest.fail(f"GGUF untested: llama.cpp's converter is not installed (run `make gguf`; expected at {gguf_convert.default_converter()})")
    # Small: the zip is offered on the page.
    link = page.locator("#export-download a").first
    link.wait_for(timeout=UI_TIMEOUT_MS)
    with page.expect_download(timeout=UI_TIMEOUT_MS) as download_info:
        link.click()
    archive = export_root.parent / "downloaded.zip"
    download_info.value.save_as(archive)
    with zipfile.ZipFile(archive) as opened:
        assert "merged/model.safetensors" in opened.namelist()

    # The same folder again: refused until the replace box is ticked, then replaced.
    before = (target / "model.safetensors").stat().st_mtime_ns
    page.locator("#export-start").click()
    refused = wait_for_text(page, "#export-plan", "exists and is not empty")
    assert str(target) in refused
    assert (target / "model.safetensors").stat().st_mtime_ns == before
    page.locator("#export-overwrite input").check()
    wait_for_text(page, "#export-plan", "replaced once the new export is complete")
    status = export_and_wait(page)
    assert translate("export.phase.done", "en") in status, status
    assert (target / "model.safetensors").stat().st_mtime_ns != before
    assert not [p for p in export_root.iterdir() if p.name.startswith(".")], "a staging folder was left behind"


def test_a_refusal_in_chinese(app_server, page_of, export_root: Path) -> None:
    taken = export_root / "taken"
    taken.mkdir(exist_ok=True)
    (taken / "keep.txt").write_text("mine")
    page = page_of("zh-CN")
    open_export_tab(page, "zh-CN")
    fill(page, "export-dir", str(taken))
    page.locator("#export-start").click()
    refused = wait_for_text(page, "#export-plan", "已存在且不为空")
    assert any("\u4e00" <= ch <= "\u9fff" for ch in refused), refused
    assert "已存在且不为空" in refused
    assert (taken / "keep.txt").read_text() == "mine"
    # keep.txt is no export's: the replace box alone is refused too, until the folder's name is
    # typed in the confirmation box (the export is not started: keep.txt stays).
    page.locator("#export-overwrite input").check()
    wait_for_text(page, "#export-plan", "并非 RocBoard 导出所写")
    fill(page, "export-confirm", "taken")
    line = wait_for_text(page, "#export-plan", "项并非导出所写，将被删除")
    assert str(taken) in line
    assert (taken / "keep.txt").read_text() == "mine"
    # Outside the export root: refused too, naming the root.
    fill(page, "export-dir", "/etc/rocboard-test")
    wait_for_text(page, "#export-plan", str(export_root))


def size_bytes(text: str) -> float:
    """ "545.0 KiB" (backend/export/size.py size_text) in bytes."""
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_a_refused_export_says_why_once(app_server, page_of, export_root: Path, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    page = page_of(browser_locale)
    open_export_tab(page, locale)
    fill(page, "export-dir", "/etc/rocboard-test")
    # The sentence between the folder and the roots: the same words however they are shown.
    refusal = translate("check.export-dir-outside.problem", locale, path="\0", roots="\0").split("\0")[1].strip()
    wait_for_text(page, "#export-plan", refusal)
    before = app_server.runs()
    page.locator("#export-start").click()
    # The status answers the click: it points at the reason (and, before, repeated it).
    wait_for_text(page, "#export-status", translate("export.not_started", locale), refusal)
    # Said where the plan is, once: not again in the status beside it.
    tab = page.locator("#tab-export").inner_text()
    assert tab.count(refusal) == 1, tab
    assert not (Path("/etc/rocboard-test")).exists() and app_server.runs() == before


def copy_as_newer(source_runs: Path, run_id: str, runs_dir: Path, new_id: str) -> str:
    """A copy of a finished run under another id, made a second after every run there."""
    shutil.copytree(source_runs / run_id, runs_dir / new_id, symlinks=True)
    state_path = runs_dir / new_id / "state.json"
    state = json.loads(state_path.read_text())
    newest = max(json.loads(path.read_text())["created"] for path in runs_dir.glob("*/state.json"))
    state.update(id=new_id, name=new_id, created=(datetime.fromisoformat(newest) + timedelta(seconds=1)).isoformat())
    state_path.write_text(json.dumps(state, indent=2))
    return new_id


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_tab_opens_on_the_latest_run_with_its_adapters_in_the_pages_language(app_server, page_of, trained_demo_run, browser_locale) -> None:
    """A run made after the app started (the first hour: the app opened on no run, then one
    trained) is the one the tab opens on, as the Chat and Evaluate tabs do."""
    locale = LOCALES[browser_locale]
    newer = "99991231-000000-newer"
    if not (app_server.runs_dir / newer).exists():
        copy_as_newer(trained_demo_run[0], trained_demo_run[1], app_server.runs_dir, newer)
    page = page_of(browser_locale)
    open_export_tab(page, locale)
    page.wait_for_function("(id) => document.querySelector('#export-run input')?.value === id", arg=newer, timeout=UI_TIMEOUT_MS, polling=250)
    assert page.locator("#export-checkpoint input").input_value() == translate("word.final_adapter", locale)
    assert page.locator("#export-dir input, #export-dir textarea").first.input_value().endswith(f"/{newer}")
