"""The Sweeps tab in headless Chromium against the real app: a sweep planned from the Train
form (its run count and cost before anything starts), a value its field refuses explained and
nothing made, the sweep started from the page, its ranked table, and the best run opened on
the Train tab. One run (the cheap case: the 2 x 2 grid and its ranking are
tests/test_sweep_demo.py); then the best run opened on Chat, Evaluate and Export, and values added
to the sweep planned (one it has refused)."""

from __future__ import annotations

import pytest

from backend.i18n import translate
from tests.harness import wait_until
from tests.test_browser_app import RUN_TIMEOUT_S, assert_no_error, fill, run_ids, text_of, wait_for_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_sweep_from_the_page_is_planned_started_ranked_and_its_best_run_opened(app_server, page_of) -> None:
    page = page_of()
    fill(page, "max-steps", "3")
    fill(page, "run-name", "pg")
    before = run_ids(app_server)
    page.get_by_role("tab", name=translate("tab.sweeps", "en")).click()
    # A value the field refuses: said with the field and the value; nothing is made.
    fill(page, "sweep-vary-0", "lora_rank=4,abc")
    page.locator("#sweep-plan").click()
    refusal = wait_for_text(page, "#sweep-plan-box", "cannot be")
    assert "LoRA rank cannot be 'abc'" in refusal and "Nothing was queued" in refusal
    page.locator("#sweep-start").click()
    wait_for_text(page, "#sweep-plan-box", "cannot be")
    assert run_ids(app_server) == before
    # The plan: the runs, their names and cost, before anything starts.
    fill(page, "sweep-vary-0", "lora_rank=4")
    page.locator("#sweep-plan").click()
    plan = wait_for_text(page, "#sweep-plan-box", "1 runs")
    assert "pg-r4" in plan and "lora_rank=4" in plan and "Nothing has started yet" in plan
    assert run_ids(app_server) == before
    # Started: the run is made through the page's Start and the table shows it.
    page.locator("#sweep-start").click()
    wait_for_text(page, "#sweep-table", "pg-r4", timeout_ms=RUN_TIMEOUT_S * 1000 // 2)
    (run,) = [state for state in app_server.runs() if state["id"] not in before]
    assert run["name"] == "pg-r4"

    def ended() -> bool:
        page.locator("#sweep-refresh").click()
        page.wait_for_timeout(1000)
        return "Every run of the sweep has ended." in text_of(page, "#sweep-table")

    wait_until(ended, RUN_TIMEOUT_S, interval=1.0, what="the sweep's run to end")
    table = text_of(page, "#sweep-table")
    assert f"Best run: {run['id']}" in table and "finished" in table
    assert_no_error(page, "a sweep from the page")
    # The best run, one click away: the Train tab shows it (Chat, Evaluate and Export offer it there).
    page.locator("#sweep-open-best").click()
    wait_for_text(page, "#form-mode", f"Settings of run {run['id']}")
    # ... and on Chat, Evaluate and Export: each tab opens with the best run chosen there.
    for tab_id, box in (("export", "export-run"), ("evaluate", "eval-run"), ("chat", "chat-run")):
        page.get_by_role("tab", name=translate("tab.sweeps", "en")).click()
        page.locator(f"#sweep-open-{tab_id}").click()
        page.wait_for_function("([box, id]) => (document.querySelector(`#${box} input`)?.value ?? '').includes(id)", arg=[box, run["id"]], timeout=30_000, polling=250)
        assert page.locator(f"#{box}").is_visible()
    # Values added later: one the sweep has is refused; a new one is planned with its cost.
    page.get_by_role("tab", name=translate("tab.sweeps", "en")).click()
    fill(page, "sweep-add", "lora_rank=4")
    page.locator("#sweep-add-plan").click()
    refusal = wait_for_text(page, "#sweep-add-plan-box", "already")
    assert "LoRA rank has the value '4' in this sweep already" in refusal and "Nothing was queued" in refusal
    fill(page, "sweep-add", "lora_rank=8")
    page.locator("#sweep-add-plan").click()
    plan = wait_for_text(page, "#sweep-add-plan-box", "1 runs")
    assert "pg-r8" in plan and "Nothing has started yet" in plan
    assert run_ids(app_server) == before | {run["id"]}  # planned only: nothing made
    assert_no_error(page, "the best run opened elsewhere, values added")
