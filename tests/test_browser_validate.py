"""The Validate tab in headless Chromium (issue 29 §1): the validation path from the page, its
reports read as a page, downloaded, uploaded from elsewhere and compared; in English and in
Chinese.

One app server for the module (tests/conftest.py `app_server`, a runs folder of its own). One
test runs a real path (rungs one_gpu + n_gpus: two short runs of the offline demo model with
the real llamafactory-cli, the second on two torchrun processes on gloo); the other tests are
cheap: bad input refused (nothing started), hand-made reports shown and compared, a hostile
report file refused. Every word is looked up with `translate()` (or the renderer the page
uses), never written here.
"""

from __future__ import annotations

import html
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from backend.config.presets import load_presets
from backend.i18n import translate
from backend.service import demo_form
from backend.validate.path import RequestError, ValidationRequest, check_request
from backend.validate.report import Note, ReportError, RungResult, ValidationReport, list_reports, load_report, report_from_json, save_report, to_json
from backend.validate.tab_view import refusal_markdown
from backend.validate.view import note_markdown
from tests.test_browser_app import UI_TIMEOUT_MS, fill, folded, plain, shoot, text_of, wait_for_text, wait_until_idle
from tests.test_zh_no_english import english_runs

pytestmark = pytest.mark.browser

PATH_TIMEOUT_MS = 900_000  # two demo runs on two busy cores: ~2 min here, slack for CI


# --- helpers ---------------------------------------------------------------------------------


def open_validate_tab(page, locale: str = "en") -> None:
    page.get_by_role("tab", name=translate("tab.validate", locale)).click()
    page.wait_for_selector("#validate-start", timeout=UI_TIMEOUT_MS)
    wait_until_idle(page)


def button_state(page, element_id: str) -> dict:
    return page.evaluate("(id) => { const b = document.querySelector('#' + id); return {enabled: !!b && !b.disabled, red: !!b && b.classList.contains('stop')}; }", element_id)


def choose(page, element_id: str, needle: str, attempts: int = 3) -> None:
    """Picks the option of a Gradio dropdown whose label holds `needle` (opened again when an
    update of its choices closed it under the click)."""
    for attempt in range(attempts):
        page.locator(f"#{element_id} input").click()
        option = page.locator(f"#{element_id} ul.options li", has_text=needle).first
        try:
            option.click(timeout=10_000)
            break
        except PlaywrightTimeout:
            if attempt == attempts - 1:
                raise
            page.keyboard.press("Escape")
            wait_until_idle(page)
    page.wait_for_function("([id, needle]) => (document.querySelector('#' + id + ' input')?.value ?? '').includes(needle)", arg=[element_id, needle], timeout=UI_TIMEOUT_MS)
    wait_until_idle(page)


def upload(page, path: Path) -> None:
    page.locator("#validate-upload input[type=file]").set_input_files(str(path))


def heading(report_markdown_line: str) -> str:
    return plain(report_markdown_line.lstrip("#").strip())


def refused(request: ValidationRequest, locale: str) -> str:
    """The refusal the page must show for `request`, as the desk's own check words it."""
    presets, _ = load_presets()
    with pytest.raises(RequestError) as caught:
        check_request(request, presets)
    return plain(refusal_markdown(caught.value.message_id, caught.value.params, locale))


CURVE = tuple((step, round(4.0 - 0.05 * step, 4)) for step in range(1, 25))


def handmade(report_id: str, created_at: float, rocm: str, n_gpus: RungResult) -> ValidationReport:
    """A report as an earlier path on another setup would have left it."""
    one = RungResult("one_gpu", "pass", ("20200101-000000-validate-one-gpu",), {"final_loss": 2.8, "tokens_per_s": 1500.0, "global_batch": 4}, (), CURVE)
    return ValidationReport(
        id=report_id,
        created_at=created_at,
        request={"preset": "cpu-demo", "model": "/models/demo", "dataset": "demo", "gpus": 2, "rungs": ["one_gpu", "n_gpus"]},
        rungs=(one, n_gpus),
        machine={"rocm": rocm, "torch": "2.14.1", "gpu.count": "2"},
        data_fingerprint="sha256:" + "ab" * 32,
    )


# --- Chinese: bad input refused, kept reports read and compared, a hostile file refused ---------


def test_the_validate_tab_in_chinese_refuses_bad_input_compares_kept_reports_and_stops_a_path(app_server, page_of, tmp_path: Path, starts_trainer) -> None:
    server = app_server
    older = handmade("20261101-090000-0a0a0a", time.time() - 30 * 86400, "6.1.0", RungResult("n_gpus", "pass", ("r2",), {"final_loss": 2.8, "max_loss_gap": 1e-7}, (), CURVE))
    cause = Note("validate.cause.global_batch", {"one": 4, "many": 8, "processes": 2})
    newer = handmade("20261201-090000-0b0b0b", time.time() - 86400, "6.2.4", RungResult("n_gpus", "fail", ("r3",), {"final_loss": 3.1, "max_loss_gap": 0.08}, (cause,), CURVE))
    for report in (older, newer):
        save_report(server.runs_dir, report)
    runs_before = len(server.runs())

    page = page_of("zh-CN", editable=False)
    open_validate_tab(page, "zh-CN")
    tab = page.locator("#tab-validate")
    for key in ("validate.tab.preset", "validate.tab.gpus", "validate.tab.model", "validate.tab.rungs", "validate.tab.start"):
        assert translate(key, "zh-CN") in tab.inner_text(), key
    assert translate("validate.rung.fault_drill", "zh-CN") in tab.inner_text() and translate("validate.rung.nodes", "zh-CN") in tab.inner_text()

    # Bad input: more processes than this machine has, then a model that is not there.
    fill(page, "validate-gpus", "9")
    page.locator("#validate-start").click()
    expected = refused(ValidationRequest(gpus=9), "zh-CN")
    said = folded(wait_for_text(page, "#validate-refusal", expected[:12]))
    assert expected in said, said
    fill(page, "validate-gpus", "2")
    fill(page, "validate-model", str(tmp_path / "no-model"))
    page.locator("#validate-start").click()
    expected = refused(ValidationRequest(model=str(tmp_path / "no-model")), "zh-CN")
    said = folded(wait_for_text(page, "#validate-refusal", str(tmp_path / "no-model")))
    assert expected in said, said
    assert len(server.runs()) == runs_before, "a refused path started a run"
    assert [r.id for r in list_reports(server.runs_dir)] == [newer.id, older.id], "a refused path left a report"

    # The kept reports: the newest is shown, its failed rung with the cause in Chinese.
    page.get_by_role("tab", name=translate("tab.runs", "zh-CN")).click()
    open_validate_tab(page, "zh-CN")  # a visit lists the reports on disk now
    view = folded(wait_for_text(page, "#validate-report-view", newer.id))
    assert heading(translate("validate.view.rung_heading", "zh-CN", rung=translate("validate.rung.n_gpus", "zh-CN"), status=translate("validate.status.fail", "zh-CN"))) in view
    assert plain(note_markdown(cause, "zh-CN")) in view
    assert translate("validate.figure.max_loss_gap", "zh-CN") in view

    # Compared with the older one: the ROCm change and the rung that now fails.
    choose(page, "validate-compare-with", older.id)
    page.locator("#validate-compare").click()
    compared = folded(wait_for_text(page, "#validate-comparison", "6.1.0"))
    assert heading(translate("validate.compare.title", "zh-CN", old=older.id, new=newer.id)) in plain(compared)
    assert translate("validate.compare.machine_changed", "zh-CN").rstrip("：:") in compared and "6.2.4" in compared
    status_changed = translate(
        "validate.compare.status_changed", "zh-CN", rung=translate("validate.rung.n_gpus", "zh-CN"), old=translate("validate.status.pass", "zh-CN"), new=translate("validate.status.fail", "zh-CN")
    )
    assert plain(status_changed) in compared

    # A hostile report file: refused by name, its markup shown as text, nothing kept.
    hostile = json.loads(to_json(older))
    hostile["id"] = "20261102-090000-0c0c0c"
    hostile["<img src=x onerror=alert(1)>"] = 1
    bad = tmp_path / "hostile.json"
    bad.write_text(json.dumps(hostile))
    with pytest.raises(ReportError) as caught:
        report_from_json(bad.read_bytes())
    upload(page, bad)
    # Shown as the characters they are (escaped Markdown, entities for < and >), never as an element.
    expected = html.unescape(plain(refusal_markdown(caught.value.message_id, caught.value.params, "zh-CN", frame="validate.tab.upload_refused")))
    note = folded(wait_for_text(page, "#validate-upload-note", expected[:8]))
    assert expected in plain(note), note
    assert page.locator("#validate-upload-note img").count() == 0
    assert [r.id for r in list_reports(server.runs_dir)] == [newer.id, older.id], "a refused file was kept"

    text = tab.inner_text()
    assert english_runs(text) == [], f"English on the Chinese Validate tab: {english_runs(text)}"
    shoot(page, "validate-zh-CN")

    # Stop: a path of rung 1 alone, stopped while its run trains: the run stopped, the rest of
    # the path reported so, in Chinese.
    fill(page, "validate-model", demo_form()["model_path"])
    for rung in ("n_gpus", "fault_drill"):
        page.locator("#validate-rungs label", has_text=translate(f"validate.rung.{rung}", "zh-CN")).locator("input").uncheck()
    page.locator("#validate-start").click()
    wait_for_text(page, "#validate-status", translate("validate.tab.state.running", "zh-CN"))
    page.wait_for_function("() => { const b = document.querySelector('#validate-stop'); return !!b && !b.disabled && b.classList.contains('stop'); }", timeout=UI_TIMEOUT_MS)
    page.locator("#validate-stop").click()
    page.wait_for_function("() => document.querySelector('#validate-stop')?.disabled === true", timeout=UI_TIMEOUT_MS, polling=250)
    [stopped_id] = {r.id for r in list_reports(server.runs_dir)} - {newer.id, older.id}
    stopped = load_report(server.runs_dir, stopped_id)
    assert [(r.rung, r.status) for r in stopped.rungs] == [("one_gpu", "stopped")]
    [run] = [state for state in server.runs() if state["id"] in stopped.rungs[0].run_ids]
    assert run["state"] == "stopped"
    table = folded(wait_for_text(page, "#validate-status", translate("validate.status.stopped", "zh-CN")))
    assert f"{translate('validate.rung.one_gpu', 'zh-CN')} {translate('validate.status.stopped', 'zh-CN')}" in table
    wait_for_text(page, "#validate-report-view", stopped_id)

    # The language switch: the panels are drawn again in English, the comparison too.
    page.locator("#language label", has_text="English").click()
    english = heading(translate("validate.view.rung_heading", "en", rung=translate("validate.rung.one_gpu", "en"), status=translate("validate.status.stopped", "en")))
    wait_for_text(page, "#validate-report-view", english)
    assert plain(note_markdown(Note("validate.note.path_stopped", {}), "en")) in folded(text_of(page, "#validate-report-view"))
    status = folded(wait_for_text(page, "#validate-status", translate("validate.tab.rung", "en")))
    assert f"{translate('validate.rung.one_gpu', 'en')} {translate('validate.status.stopped', 'en')}" in status, status
    wait_for_text(page, "#validate-comparison", translate("validate.compare.machine_changed", "en").rstrip(":"))
    assert translate("validate.tab.start", "en") in tab.inner_text()


# --- English: the path from the page, its report downloaded, an older one uploaded and compared --


def test_a_path_started_from_the_page_passes_and_its_report_compares_with_an_uploaded_older_one(app_server, page_of, tmp_path: Path, starts_trainer) -> None:
    server = app_server
    before = {state["id"] for state in server.runs()}
    reports_before = {r.id for r in list_reports(server.runs_dir)}
    page = page_of("en-US", editable=False)
    open_validate_tab(page)
    assert button_state(page, "validate-stop") == {"enabled": False, "red": False}
    page.locator("#validate-rungs label", has_text=translate("validate.rung.fault_drill", "en")).locator("input").uncheck()
    page.locator("#validate-start").click()

    # While it runs: the rungs' table, Stop red and usable.
    wait_for_text(page, "#validate-status", translate("validate.tab.state.running", "en"))
    page.wait_for_function("() => { const b = document.querySelector('#validate-stop'); return !!b && !b.disabled && b.classList.contains('stop'); }", timeout=UI_TIMEOUT_MS)
    # Another page opened meanwhile (a reload, a second tab) finds the path and follows it.
    other = page_of("en-US", editable=False)
    open_validate_tab(other)
    wait_for_text(other, "#validate-status", translate("validate.tab.state.running", "en"))
    other.wait_for_function("() => { const b = document.querySelector('#validate-stop'); return !!b && !b.disabled; }", timeout=UI_TIMEOUT_MS)
    other.context.close()
    one_gpu, n_gpus = translate("validate.rung.one_gpu", "en"), translate("validate.rung.n_gpus", "en")
    passed = heading(translate("validate.view.rung_heading", "en", rung=n_gpus, status=translate("validate.status.pass", "en")))
    # The path ends: Stop is no longer usable, and its report is the one shown below.
    page.wait_for_function("() => document.querySelector('#validate-stop')?.disabled === true", timeout=PATH_TIMEOUT_MS, polling=500)
    [new_id] = {r.id for r in list_reports(server.runs_dir)} - reports_before
    view = folded(wait_for_text(page, "#validate-report-view", new_id))
    report = load_report(server.runs_dir, new_id)
    assert [(r.rung, r.status) for r in report.rungs] == [("one_gpu", "pass"), ("n_gpus", "pass")], [(r.rung, r.status, r.causes) for r in report.rungs]
    assert heading(translate("validate.view.rung_heading", "en", rung=one_gpu, status=translate("validate.status.pass", "en"))) in view and passed in view
    # Its figures, as the report holds them; the runs are real runs in the runs folder.
    rung2 = report.rungs[1]
    for name in ("final_loss", "tokens_per_s", "max_loss_gap", "scaling_efficiency"):
        assert translate(f"validate.figure.{name}", "en") in view, name
    assert f"{rung2.figures['final_loss']:.6g}" in view and f"{rung2.figures['max_loss_gap']:.6g}" in view
    made = {state["id"]: state for state in server.runs() if state["id"] not in before}
    assert set(made) == {report.rungs[0].run_ids[0], rung2.run_ids[0]} and all(state["state"] == "finished" for state in made.values())
    status = folded(text_of(page, "#validate-status"))
    assert plain(translate("validate.progress.done", "en", passed=2, rungs=2)) in status
    assert button_state(page, "validate-stop") == {"enabled": False, "red": False}
    shoot(page, "validate")

    # The report downloads as the JSON kept.
    link = page.locator("#validate-download a").first
    link.wait_for(timeout=UI_TIMEOUT_MS)
    with page.expect_download(timeout=UI_TIMEOUT_MS) as download_info:
        link.click()
    downloaded = tmp_path / "report.json"
    download_info.value.save_as(downloaded)
    assert report_from_json(downloaded.read_bytes()) == report

    # An older report from another machine (an earlier ROCm; rung 1 was faster there), uploaded.
    machine = {**report.machine, "rocm": "6.1.0" if report.machine.get("rocm") != "6.1.0" else "6.0.0"}
    fast = replace(report.rungs[0], figures={**report.rungs[0].figures, "tokens_per_s": float(report.rungs[0].figures["tokens_per_s"]) * 2})
    older = replace(report, id="20200101-000000-0d0d0d", created_at=report.created_at - 86400, machine=machine, rungs=(fast, rung2))
    (tmp_path / "older.json").write_text(to_json(older))
    upload(page, tmp_path / "older.json")
    wait_for_text(page, "#validate-upload-note", plain(translate("validate.tab.uploaded", "en", id=older.id)))
    assert load_report(server.runs_dir, older.id) == older

    # The new report compared with it: what changed in the fingerprint, what moved.
    choose(page, "validate-report", new_id)
    wait_for_text(page, "#validate-report-view", new_id)  # its answer came: the choices to compare with too
    choose(page, "validate-compare-with", older.id)
    page.locator("#validate-compare").click()
    compared = folded(wait_for_text(page, "#validate-comparison", translate("validate.compare.machine_changed", "en").rstrip(":")))
    assert heading(translate("validate.compare.title", "en", old=older.id, new=new_id)) in plain(compared)
    assert "rocm" in compared and machine["rocm"] in compared
    assert heading(translate("validate.compare.moved", "en", rung=one_gpu)) in compared and translate("validate.figure.tokens_per_s", "en") in compared
    assert "-50.0 %" in compared, compared  # tokens/s halved from the older report
    shoot(page, "validate-compare")
    assert os.path.isdir(server.runs_dir / "validation")
