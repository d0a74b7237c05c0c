"""This machine's queue, in headless Chromium against the real app: while a run trains, Start
queues the next (the status says its place), the Runs tab shows the queue, Sooner moves a run
up, Cancel takes one out for good, and the queued run starts on its own when the training one
ends."""

from __future__ import annotations

import pytest

from backend.i18n import translate
from backend.runs.launcher import ProcessIdentity, stop_tree
from tests.harness import wait_until
from tests.test_browser_app import RUN_TIMEOUT_S, UI_TIMEOUT_MS, assert_no_error, fill, new_run_form, run_ids, shoot, text_of, wait_for_new_run, wait_for_text, wait_until_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_the_queue_on_the_runs_tab_reorders_and_cancels(app_server, page_of) -> None:
    page = page_of()
    fill(page, "max-steps", "1000000")  # trains until stopped
    fill(page, "run-name", "holds-the-machine")
    before = run_ids(app_server)
    page.locator("#start").click()
    training = wait_for_new_run(app_server, before)["id"]
    wait_for_text(page, "#status", "Status: running", "Status: starting", timeout_ms=RUN_TIMEOUT_S * 1000)
    queued = []
    for name in ("queued-b", "queued-c"):
        # The form shows the run just started (or queued) before it is asked for a new one: on a
        # busy machine the switch to watching can land after a click on New run otherwise.
        page.wait_for_selector("#new-run", state="visible", timeout=UI_TIMEOUT_MS)
        new_run_form(page)
        fill(page, "max-steps", "20")
        fill(page, "run-name", name)
        before = run_ids(app_server)
        page.wait_for_function("() => !document.querySelector('#start').disabled", timeout=UI_TIMEOUT_MS)  # Start queues while a run trains
        page.locator("#start").click()
        queued.append(wait_for_new_run(app_server, before)["id"])
        wait_for_text(page, "#status", "Status: queued")
    assert "number 2 in line" in text_of(page, "#status")
    assert_no_error(page, "queueing two runs")
    page.get_by_role("tab", name=translate("tab.runs", "en")).click()
    queue = wait_for_text(page, "#queue", queued[1])
    assert f"Training here now: {training}" in queue and queue.index(queued[0]) < queue.index(queued[1])
    shoot(page, "queue")
    # The last one first.
    page.locator("#queue-pick input").fill(queued[1])
    page.keyboard.press("Enter")
    page.locator("#queue-up").click()
    wait_for_text(page, "#queue-message", "Moved.")
    queue = text_of(page, "#queue")
    assert queue.index(queued[1]) < queue.index(queued[0])
    # The other one cancelled: it never starts.
    page.locator("#queue-pick input").fill(queued[0])
    page.keyboard.press("Enter")
    page.locator("#queue-cancel").click()
    wait_for_text(page, "#queue-message", "Cancelled")
    states = {state["id"]: state for state in app_server.runs()}
    assert states[queued[0]]["state"] == "stopped" and states[queued[0]]["stop_reason"] == "reason.cancelled_in_queue"
    assert states[queued[1]]["state"] == "queued"
    # The training run ends: the queued one starts on its own.
    page.get_by_role("tab", name=translate("tab.train", "en")).click()
    state = states[training]
    stop_tree(ProcessIdentity(state["pid"], state["pid_started"], state.get("pid_start_key", "")))
    wait_until(lambda: {s["id"]: s for s in app_server.runs()}[queued[1]]["state"] == "finished", RUN_TIMEOUT_S, what="the queued run to start and finish")
    assert {s["id"]: s for s in app_server.runs()}[queued[0]]["pid"] is None
    wait_until_idle(page)
    assert_no_error(page, "the queue moving on")
