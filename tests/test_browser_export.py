"""The Export tab in headless Chromium: a trained demo run merged into its base model and written
to a folder (GGUF too when llama.cpp's converter is installed), the merged model offered for
download, an existing folder refused until the replace box is ticked (and, when it holds files
no export wrote, until its name is typed), and a refusal in Chinese.

One app server for the module, started with `--export-root` on a temporary folder and a copy
of the session's trained demo run in its runs dir. Every word is looked up with `translate()`.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from backend.export import gguf_convert
from backend.i18n import translate
from tests.harness import AppServer, copy_run
from tests.test_browser_app import UI_TIMEOUT_MS, fill, shoot, text_of, wait_for_text

pytestmark = pytest.mark.browser

EXPORT_TIMEOUT_MS = 240_000


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
    try:
        yield server
    finally:
        server.stop()


def open_export_tab(page, locale: str = "en") -> None:
    page.get_by_role("tab", name=translate("tab.export", locale)).click()
    page.wait_for_selector("#export-start", timeout=UI_TIMEOUT_MS)


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
    wait_for_text(page, "#export-plan", "Size needed")
    status = export_and_wait(page)
    assert translate("export.phase.done", "en") in status, status
    shoot(page, "export-done")
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
    refused = wait_for_text(page, "#export-status", "exists and is not empty")
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
    refused = wait_for_text(page, "#export-status", "taken")
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
