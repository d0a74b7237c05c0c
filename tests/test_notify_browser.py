"""The browser's word when a run ends, in Chromium on the real app (ui/notify.py): a tab whose
notifications are allowed shows one when the run it shows ends, in its own language, and the
app's webhook (ROCBOARD_WEBHOOK_URL) gets the same event; the URL's secret part is in neither
the app's output nor the page. A tab that has not been asked asks once, on its first click.
The run is a stand-in trainer (tests/harness.py fake_run) the app re-attaches to."""

from __future__ import annotations

import pytest

from tests.harness import AppServer, fake_run, wait_until
from tests.test_notify import SECRET, Receiver

NOTICE_REQUESTS_JS = "() => performance.getEntriesByType('resource').filter(e => e.name.includes('/rocboard/notices?')).length"


@pytest.mark.browser
def test_a_tab_is_told_when_its_run_ends_and_so_is_the_webhook(chromium, tmp_path, starts_app_server):
    receiver = Receiver("ok")
    workdir = tmp_path / "app"
    run_id, _, stand_in = fake_run(workdir / "runs", 3, active=True)
    try:
        with AppServer("--no-warm-start", workdir=workdir, env={"ROCBOARD_WEBHOOK_URL": receiver.url()}) as server:
            allowed = chromium.new_context(locale="zh-CN", permissions=["notifications"])
            asking = chromium.new_context(locale="en-US")
            try:
                page = allowed.new_page()
                page.goto(server.url)
                page.wait_for_function(f"() => document.querySelector('#live-state [data-run=\"{run_id}\"][data-active=\"1\"]')", timeout=120_000)
                page.wait_for_function(f"() => ({NOTICE_REQUESTS_JS})() >= 1", timeout=30_000)  # its cursor, while the run trains
                stand_in.kill()
                stand_in.wait()
                page.wait_for_function("() => window.rocboardNotify.shown.length >= 1", timeout=60_000)
                shown = page.evaluate("() => window.rocboardNotify.shown")
                assert [(e["kind"], e["run"]) for e in shown] == [("run_failed", run_id)]
                assert "失败" in shown[0]["title"]  # the tab's language, not the app's
                wait_until(lambda: receiver.posts, 30, what="the webhook's POST")
                assert [(body["event"], body["run"], body["lang"]) for _, body in receiver.posts] == [("run_failed", run_id, "en")]
                assert f"http://127.0.0.1:{receiver.port}/…" in server.output() and SECRET not in server.output()
                assert SECRET not in page.content()
                with open(f"/proc/{server.pid}/environ", "rb") as block:  # read once, masked in the app's own block
                    assert SECRET.encode() not in block.read()

                # A tab not yet asked: asked on its first click, once; nothing asked of the app meanwhile.
                other = asking.new_page()
                other.add_init_script("Notification.requestPermission = () => { window.askedFor = (window.askedFor || 0) + 1; return Promise.resolve('denied'); };")
                other.goto(server.url)
                other.wait_for_selector("#live-state [data-live]", state="attached", timeout=60_000)
                other.locator("body").click()
                other.locator("body").click()
                assert other.evaluate("() => window.askedFor") == 1
                assert other.evaluate(NOTICE_REQUESTS_JS) == 0
            finally:
                allowed.close()
                asking.close()
    finally:
        if stand_in.poll() is None:
            stand_in.kill()
        receiver.close()
