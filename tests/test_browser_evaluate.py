"""The Evaluate tab in headless Chromium: pick a trained run, evaluate it on held-out data with
LLaMA-Factory's predict mode, see the predictions and scores, find the scores in the runs
table, open the evaluation in the Train tab; and the tab in Chinese.

One app server for the module, over a copy of the session's trained demo run (real
llamafactory-cli predict on the offline CPU demo model). Every word is looked up with
`translate()`.
"""

from __future__ import annotations

import json

import pytest

from backend.evaluate import format_scores, parse_scores
from backend.i18n import translate
from tests.harness import AppServer, copy_run
from tests.test_browser_app import UI_TIMEOUT_MS, fill, shoot, text_of, wait_for_text, wait_until_idle

pytestmark = pytest.mark.browser

EVAL_TIMEOUT_MS = 240_000


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


def open_evaluate_tab(page, run_id: str, locale: str = "en") -> None:
    page.get_by_role("tab", name=translate("tab.evaluate", locale)).click()
    page.wait_for_function(
        "(id) => (document.querySelector('#eval-run input')?.value ?? '').includes(id)", arg=run_id, timeout=UI_TIMEOUT_MS, polling=250
    )
    wait_until_idle(page)


def evaluations(server) -> list[dict]:
    return [state for state in server.runs() if state.get("kind") == "evaluate"]


def test_evaluate_shows_predictions_and_scores_and_the_runs_table_has_them(eval_server, page_of) -> None:
    server, source = eval_server
    page = page_of(editable=False)
    open_evaluate_tab(page, source)
    assert translate("eval.dataset.demo", "en", name="demo") in page.locator("#eval-dataset input").input_value()
    fill(page, "eval-max-samples", "12")
    fill(page, "eval-max-new-tokens", "16")
    page.locator("#eval-start").click()
    wait_for_text(page, "#eval-scores", "BLEU-4", timeout_ms=EVAL_TIMEOUT_MS)
    [evaluation] = evaluations(server)
    assert evaluation["source_run"] == source and evaluation["state"] == "finished"
    assert evaluation["launch"] in ("warm", "cold")  # started like a trainer
    eval_id = evaluation["id"]
    status = wait_for_text(page, "#eval-status", translate("eval.status.finished", "en", run_id=eval_id, rows=12))
    assert eval_id in status
    table = wait_for_text(page, "#eval-table", "The opposite of down is up.")
    for header in ("prompt", "reference", "prediction"):
        assert translate(f"eval.table.{header}", "en") in table
    # The prompt's special tokens are shown as the text they are, not taken for HTML.
    assert "<|start_header_id|>" in table
    scores = parse_scores((server.runs_dir / eval_id / "output" / "predict_results.json").read_text())
    assert format_scores(scores).split(" · ")[0] in text_of(page, "#eval-scores")
    shoot(page, "evaluate-en")

    # The runs table: both rows carry the scores; the evaluation says what it is.
    page.get_by_role("tab", name=translate("tab.runs", "en")).click()
    runs_table = wait_for_text(page, "#runs-table", eval_id)
    shoot(page, "evaluate-runs-table-en")
    assert runs_table.count(format_scores(scores)) == 2
    assert translate("eval.kind.evaluate", "en") in runs_table and translate("eval.column.scores", "en") in runs_table

    # Open it in the Train tab: its status and log are there.
    page.get_by_role("tab", name=translate("tab.evaluate", "en")).click()
    page.locator("#eval-open").click()
    wait_for_text(page, "#status", eval_id)
    assert json.loads((server.runs_dir / eval_id / "state.json").read_text())["kind"] == "evaluate"


def test_the_evaluate_tab_in_chinese(eval_server, page_of) -> None:
    server, source = eval_server
    page = page_of("zh-CN", editable=False)
    open_evaluate_tab(page, source, "zh-CN")
    for key in ("eval.label.run", "eval.label.checkpoint", "eval.label.dataset", "eval.label.max_samples", "eval.button.start"):
        assert translate(key, "zh-CN") in page.locator("#tab-evaluate").inner_text() or translate(key, "zh-CN") in page.content()
    assert translate("eval.checkpoint.final", "zh-CN") == page.locator("#eval-checkpoint input").input_value()
    # A refused start says why in Chinese, and makes nothing.
    before = len(server.runs())
    fill(page, "eval-max-samples", "0")
    page.locator("#eval-start").click()
    findings = wait_for_text(page, "#eval-findings", "max_samples")
    assert any("\u4e00" <= ch <= "\u9fff" for ch in findings)
    assert len(server.runs()) == before
    shoot(page, "evaluate-zh")
