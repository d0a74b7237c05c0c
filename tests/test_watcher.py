"""The watcher: the page's one-a-second question about the run it shows (ui/live.py,
ui/live.js, backend/service/live.py).

- The answer: no charts when nothing changed since the version drawn, the charts when
  something did; the same version the run panel carries (else the page would refresh
  forever); unknown or malformed run ids answered "gone", never looked up.
- The route, on the real server: behind the guard (Host, Origin), GET/HEAD only, a bounded
  query of the page's own shape (any other, six repeated fields included, is a 400, never a
  500); plotly.js served gzipped and cacheable.
- In Chromium: a tab asks once a second while its run trains, stops when the run ends, and
  starts again when a run starts; with no live run it sends nothing.
"""

from __future__ import annotations

import gzip
import json
import signal
import time

import pytest

from backend.service import RocBoard
from backend.service.live import version_key
from tests.harness import ROOT, AppServer, fake_run, http_get, trainer_log_line, wait_until


@pytest.fixture
def board(tmp_path):
    return RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")


# --- the answer ------------------------------------------------------------------------------


def test_an_unchanged_run_is_answered_without_its_charts(board):
    run_id, _, _ = fake_run(board.store.root, 3, active=False)
    first = board.live(run_id, "en", "")
    assert first.version and not first.active and not first.gone
    assert len(first.charts["loss"]["data"][0]["x"]) == 3 and "data" in first.charts["memory"]
    again = board.live(run_id, "en", first.version)
    assert again.version == first.version and again.charts is None
    assert set(again.as_json()) == {"version", "active"}  # the whole answer of a tick that finds nothing
    # Another language is another drawing: the chart's words change.
    chinese = board.live(run_id, "zh-CN", first.version)
    assert chinese.version != first.version and chinese.charts is not None
    assert chinese.charts["loss"]["layout"] != first.charts["loss"]["layout"]


def test_a_training_run_moves_on_with_each_new_point(board):
    run_id, log, stand_in = fake_run(board.store.root, 2, active=True)
    try:
        first = board.live(run_id, "en", "")
        assert first.active
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(trainer_log_line(3, 20))
        moved = wait_until(lambda: (a := board.live(run_id, "en", first.version)).charts is not None and a, 10, what="the new point")
        assert len(moved.charts["loss"]["data"][0]["x"]) == 3 and moved.active
    finally:
        stand_in.kill()
        stand_in.wait()


def test_the_route_and_the_panel_agree_on_the_version(board):
    """The page's #live-state carries the panel's version; the route answers its own. Equal
    for the same run and language, or the script would ask Gradio to redraw every second."""
    run_id, _, _ = fake_run(board.store.root, 5, active=False)
    panel = board.run_view(run_id, "zh-CN")
    assert board.live(run_id, "zh-CN", "").version == version_key(panel.version)


@pytest.mark.parametrize("run_id", ["", "../../etc", "a" * 200, "x y", "..", "-rf", "run\x00id", "不是"])
def test_a_malformed_run_id_is_gone_without_a_lookup(board, run_id):
    answer = board.live(run_id, "en", "")
    assert answer.gone and answer.charts is None and answer.as_json() == {"version": "", "active": False, "gone": True}


def test_a_run_that_does_not_exist_is_gone(board):
    assert board.live("20260101-000000-nothing", "en", "").gone


# --- the route, on the real server ------------------------------------------------------------


@pytest.fixture(scope="module")
def server(starts_app_server):
    with AppServer() as running:
        yield running


def test_the_route_answers_the_page_and_nobody_else(server):
    run_id, _, _ = fake_run(server.runs_dir, 4, active=False)
    status, headers, body = http_get(server.port, f"/rocboard/live?run={run_id}&lang=en&drawn=")
    assert status == 200 and headers["content-type"] == "application/json" and headers["cache-control"] == "no-store"
    answer = json.loads(body)
    assert len(answer["charts"]["loss"]["data"][0]["x"]) == 4 and answer["active"] is False
    status, _, body = http_get(server.port, f"/rocboard/live?run={run_id}&lang=en&drawn={answer['version']}")
    assert status == 200 and json.loads(body) == {"version": answer["version"], "active": False}
    # An unknown language is English, a missing run "gone": answers, not errors.
    assert json.loads(http_get(server.port, f"/rocboard/live?run={run_id}&lang=xx")[2])["version"] == answer["version"]
    assert json.loads(http_get(server.port, "/rocboard/live")[2])["gone"] is True
    # What the page never sends.
    assert http_get(server.port, f"/rocboard/live?run={run_id}", method="POST", body=b"{}")[0] == 405
    assert http_get(server.port, "/rocboard/live?run=" + "a" * 500)[0] == 414
    # The guard stands in front: another Host, another site.
    assert http_get(server.port, f"/rocboard/live?run={run_id}", headers={"Host": "evil.example"})[0] == 400
    assert http_get(server.port, f"/rocboard/live?run={run_id}", headers={"Origin": "http://evil.example"})[0] == 403


RUN = "20260101-000000-x"


def test_the_queries_the_page_sends_are_read():
    from ui.live import parse_live_query

    # What live.js's URLSearchParams makes: a tick, a tick before anything was drawn, the first question.
    assert parse_live_query(f"run={RUN}&lang=zh-CN&drawn=0123456789abcdef".encode()) == {"run": RUN, "lang": "zh-CN", "drawn": "0123456789abcdef"}
    assert parse_live_query(b"run=&lang=en&drawn=") == {"run": "", "lang": "en", "drawn": ""}
    assert parse_live_query(b"first=1") == {"first": "1"} and parse_live_query(b"") == {}
    assert parse_live_query(b"run=a%2Db") == {"run": "a-b"}  # percent-encoding is read
    assert parse_live_query(b"run=a&run=a") is None


@pytest.mark.hostile
@pytest.mark.parametrize(
    "query",
    [
        "&".join(["run=" + RUN] * 6),  # more fields than parse_qs's max_num_fields: was a 500
        "&".join(f"x{n}=1" for n in range(8)),
        f"run={RUN}&run=other",  # which one would count?
        f"run={RUN}&lang=en&drawn=&debug=1",  # a field the page never sends
        "run=%C3%A9t%C3%A9",  # non-ASCII, percent-encoded
        "run=%FF%FE",  # not UTF-8
        "run=a%00b",  # NUL
        "run=a%0Ab",  # a line break
        "run=..%2F..%2Fetc",
        "drawn=" + "a" * 300,  # under the 400-byte cap, longer than any version
        "lang=" + "e" * 100,
        "run",  # no "="
        f"run={RUN};lang=en",
        "first=yes",
        "=1",
    ],
)
def test_a_query_the_page_never_sends_is_a_400(server, query):
    printed = len(server.output())
    status, headers, body = http_get(server.port, f"/rocboard/live?{query}")
    assert (status, headers["content-type"], body) == (400, "text/plain; charset=utf-8", b"Bad query: the page asks with run, lang, drawn or first, each at most once.\n")
    # HEAD is answered the same, without the body; and the route still answers the page.
    assert http_get(server.port, f"/rocboard/live?{query}", method="HEAD")[0] == 400
    assert http_get(server.port, f"/rocboard/live?run={RUN}&lang=en&drawn=")[0] == 200
    assert "Traceback" not in server.output()[printed:]


@pytest.mark.hostile
def test_a_raw_non_ascii_query_is_a_400(server):
    import socket

    printed = len(server.output())
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        connection.sendall(b"GET /rocboard/live?run=\xc3\xa9&lang=en HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert "Traceback" not in server.output()[printed:]


def test_plotly_is_served_gzipped_and_cached(server):
    status, headers, body = http_get(server.port, "/rocboard/plotly.min.js?v=1", headers={"Accept-Encoding": "gzip, br"})
    assert status == 200 and headers["content-encoding"] == "gzip" and "immutable" in headers["cache-control"]
    plain = gzip.decompress(body)
    # plotly's basic bundle (ui/static/), the one the page needs: about a quarter of the full one.
    assert plain.startswith(b"/**\n* plotly.js (basic - minified) v") and len(body) < len(plain) / 2
    assert plain == (ROOT / "ui" / "static" / "plotly-basic.min.js").read_bytes()
    status, headers, body = http_get(server.port, "/rocboard/plotly.min.js")
    assert status == 200 and "content-encoding" not in headers and body == plain
    assert headers["content-type"].startswith("text/javascript")


# --- in Chromium ------------------------------------------------------------------------------

# Each request the tab made to the watcher's route: (epoch seconds, run id asked about).
LIVE_REQUESTS_JS = """() => performance.getEntriesByType('resource')
  .filter(e => e.name.includes('/rocboard/live?'))
  .map(e => [(performance.timeOrigin + e.startTime) / 1000, new URL(e.name).searchParams.get('run')])"""


def requests_between(page, start: float, end: float, run_id: str | None = None) -> list[float]:
    return [at for at, run in page.evaluate(LIVE_REQUESTS_JS) if start <= at <= end and (run_id is None or run == run_id)]


@pytest.mark.browser
def test_a_tab_asks_while_its_run_trains_and_stops_when_it_ends(chromium, server):
    run_id, _, stand_in = fake_run(server.runs_dir, 5, active=True)
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(server.url)
        page.evaluate("() => performance.setResourceTimingBufferSize(100000)")
        page.wait_for_function(f"() => document.querySelector('#live-state [data-run=\"{run_id}\"][data-active=\"1\"]')", timeout=60_000)
        page.wait_for_function("() => (document.querySelector('#loss-chart .js-plotly-plot')?.data?.[0]?.x || []).length === 5", timeout=60_000)
        watched_from = time.time()
        time.sleep(3.5)
        assert len(requests_between(page, watched_from, time.time(), run_id)) >= 3  # once a second while it trains

        # The trainer dies: the run ends, the panel says so, and the tab stops asking.
        stand_in.send_signal(signal.SIGKILL)
        stand_in.wait()
        page.wait_for_function(f"() => document.querySelector('#live-state [data-run=\"{run_id}\"][data-active=\"0\"]')", timeout=30_000)
        quiet_from = time.time() + 1.5  # one request may be on its way as the panel changes
        time.sleep(4.5)
        assert requests_between(page, quiet_from, time.time()) == []

        # A run started from the page (long enough to watch; a warm start trains the demo's
        # 100 steps in ~2 s): the tab asks again, about that run, while it trains; Stop ends it.
        page.locator("#new-run").click()
        page.wait_for_function("() => !document.querySelector('#run-name input, #run-name textarea').disabled", timeout=30_000)
        page.locator("#max-steps input").fill("100000")
        page.locator("#max-steps input").press("Tab")
        known = {s["id"] for s in server.runs()}
        page.locator("#start").click()
        new_run = wait_until(lambda: next((s for s in server.runs() if s["id"] not in known), None), 120, what="the new run")
        page.wait_for_function(f"() => document.querySelector('#live-state [data-run=\"{new_run['id']}\"][data-active=\"1\"]')", timeout=300_000)
        watched_from = time.time()
        time.sleep(3.5)
        assert len(requests_between(page, watched_from, time.time(), new_run["id"])) >= 3
        page.locator("#stop").click()
        page.wait_for_function(f"() => document.querySelector('#live-state [data-run=\"{new_run['id']}\"][data-active=\"0\"]')", timeout=60_000)
        quiet_from = time.time() + 1.5
        time.sleep(4.5)
        assert requests_between(page, quiet_from, time.time()) == []
    finally:
        context.close()
        if stand_in.poll() is None:
            stand_in.kill()


# The hidden buttons the watcher presses for a panel refresh, by Gradio component id.
REFRESH_BUTTONS_JS = """() => (window.gradio_config?.components || [])
  .filter(c => ['live-refresh', 'live-refresh-all'].includes(c.props?.elem_id)).map(c => c.id)"""


def watcher_traffic(requests: list[tuple[float, str, str | None]], refresh_ids: list[int], since: float) -> tuple[list[str], list[str]]:
    """(the watcher's questions, the panel refreshes it pressed) the page sent after `since`,
    from what page.on("request") saw: a refresh is a Gradio event whose trigger is one of the
    hidden refresh buttons."""
    questions, refreshes = [], []
    for at, url, body in list(requests):
        if at < since:
            continue
        if "/rocboard/live?" in url:
            questions.append(url)
        elif ("/run/predict" in url or "/queue/join" in url) and body:
            try:
                trigger = json.loads(body).get("trigger_id")
            except ValueError:
                continue
            if trigger in refresh_ids:
                refreshes.append(url)
    return questions, refreshes


def chart_steps(page) -> int:
    return page.evaluate("() => (document.querySelector('#loss-chart .js-plotly-plot')?.data?.[0]?.x || []).length")


@pytest.mark.browser
def test_a_tab_nobody_sees_asks_nothing_and_catches_up_when_shown(chromium, server):
    """The watcher pauses while its panel is not shown (another tab of the page chosen, or the
    browser tab in the background) and brings charts, bar and panel up to date when it is."""
    from backend.i18n import translate

    run_id, log, stand_in = fake_run(server.runs_dir, 5, active=True)
    context = chromium.new_context(locale="en-US")
    try:
        page = context.new_page()
        requests: list[tuple[float, str, str | None]] = []
        # Playwright hands the events over while the test calls it: the test waits with
        # page.wait_for_timeout, not time.sleep, so that each is seen when it is sent.
        page.on("request", lambda request: requests.append((time.time(), request.url, request.post_data)))
        page.goto(server.url)
        page.wait_for_function(f"() => document.querySelector('#live-state [data-run=\"{run_id}\"][data-active=\"1\"]')", timeout=60_000)
        page.wait_for_function("() => (document.querySelector('#loss-chart .js-plotly-plot')?.data?.[0]?.x || []).length === 5", timeout=60_000)
        refresh_ids = page.evaluate(REFRESH_BUTTONS_JS)
        assert len(refresh_ids) == 2

        def grow(steps: range) -> None:
            with open(log, "a", encoding="utf-8") as handle:
                for step in steps:
                    handle.write(trainer_log_line(step, 50))
                    handle.flush()
                    page.wait_for_timeout(1200)

        # Shown, the run growing: the tab asks, and presses the refresh for each new point.
        shown_from = time.time()
        grow(range(6, 9))
        wait_until(lambda: chart_steps(page) == 8, 30, interval=0.2, what="the chart's eighth step")
        questions, refreshes = watcher_traffic(requests, refresh_ids, shown_from)
        assert len(questions) >= 2 and refreshes  # the counting sees the watcher's work

        # Another tab of the page: the run grows, nobody asks about it or refreshes its panel.
        page.get_by_role("tab", name=translate("tab.runs", "en")).click()
        page.wait_for_function("() => document.getElementById('loss-chart').getClientRects().length === 0", timeout=30_000)
        hidden_from = time.time() + 1.5  # a question or refresh already on its way may land
        page.wait_for_timeout(1500)
        grow(range(9, 13))
        page.wait_for_timeout(1500)
        assert watcher_traffic(requests, refresh_ids, hidden_from) == ([], [])
        assert chart_steps(page) == 8  # not redrawn while hidden

        # Back on the Train tab: the charts, the bar and the panel catch up.
        page.get_by_role("tab", name=translate("tab.train", "en")).click()
        page.wait_for_function("() => (document.querySelector('#loss-chart .js-plotly-plot')?.data?.[0]?.x || []).length === 12", timeout=15_000)
        step_words = translate("progress.step", "en", step=12, total=50)
        page.wait_for_function(f"() => (document.querySelector('#progress .rb-progress-text')?.innerText || '').includes({json.dumps(step_words)})", timeout=15_000)
        wait_until(lambda: watcher_traffic(requests, refresh_ids, hidden_from)[1], 15, interval=0.2, what="the panel's refresh on return")

        # The browser tab in the background (document.hidden): the same. The run ends meanwhile.
        page.evaluate("""() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
            document.dispatchEvent(new Event('visibilitychange')); }""")
        hidden_from = time.time() + 1.5
        page.wait_for_timeout(1500)
        grow(range(13, 16))
        stand_in.kill()
        stand_in.wait()
        page.wait_for_timeout(2500)
        assert watcher_traffic(requests, refresh_ids, hidden_from) == ([], [])
        assert page.locator(f'#live-state [data-run="{run_id}"][data-active="1"]').count() == 1  # nobody refreshed it
        page.evaluate("""() => { delete document.hidden; document.dispatchEvent(new Event('visibilitychange')); }""")
        page.wait_for_function("() => (document.querySelector('#loss-chart .js-plotly-plot')?.data?.[0]?.x || []).length === 15", timeout=15_000)
        page.wait_for_function(f"() => document.querySelector('#live-state [data-run=\"{run_id}\"][data-active=\"0\"]')", timeout=15_000)
    finally:
        context.close()
        if stand_in.poll() is None:
            stand_in.kill()


# The node panel's refresh, by Gradio function index: the event whose outputs are the panel and
# whose trigger is not a tab's select or a button a person presses (its hidden tick button; a
# gr.Timer's tick before, which the test must see too to fail on it).
NODE_TICK_JS = """() => {
  const config = window.gradio_config || {};
  const byId = Object.fromEntries((config.components || []).map(c => [c.id, c]));
  const panel = (config.components || []).find(c => c.props?.elem_id === 'runs-node');
  return (config.dependencies || []).filter(d => (d.outputs || []).includes(panel?.id) && (d.targets || []).some(([id, event]) =>
    event === 'tick' || byId[id]?.props?.elem_id === 'runs-node-tick')).map(d => d.id);
}"""


def node_ticks(requests: list[tuple[float, str, str | None]], tick_fns: list[int], since: float) -> int:
    """The node panel's refreshes the page sent after `since`."""
    count = 0
    for at, url, body in list(requests):
        if at >= since and ("/queue/join" in url or "/run/predict" in url) and body:  # queued or not
            try:
                count += json.loads(body).get("fn_index") in tick_fns
            except ValueError:
                continue
    return count


@pytest.mark.browser
def test_the_node_panel_refreshes_only_while_it_shows(chromium, tmp_path, starts_app_server):
    """On a node of two (simulated) GPUs the Runs tab shows the node panel, refreshed every 3 s
    while it shows; not while another tab is chosen or the browser tab is hidden."""
    from backend.i18n import translate
    from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards

    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(2), bmc_vga=False)
    with AppServer("--sysfs-root", str(sysfs), "--no-warm-start", workdir=tmp_path / "app") as app:
        context = chromium.new_context(locale="en-US")
        try:
            page = context.new_page()
            requests: list[tuple[float, str, str | None]] = []
            page.on("request", lambda request: requests.append((time.time(), request.url, request.post_data)))
            page.goto(app.url)
            page.get_by_role("tab", name=translate("tab.runs", "en")).click()
            page.wait_for_selector("#runs-node", state="visible", timeout=60_000)
            tick_fns = page.evaluate(NODE_TICK_JS)
            assert len(tick_fns) == 1
            shown_from = time.time()
            for _ in range(20):  # every 3 s while it shows (a busy server answers late)
                page.wait_for_timeout(1000)
                if node_ticks(requests, tick_fns, shown_from) >= 2:
                    break
            assert node_ticks(requests, tick_fns, shown_from) >= 2

            page.get_by_role("tab", name=translate("tab.train", "en")).click()
            page.wait_for_function("() => document.getElementById('runs-node').getClientRects().length === 0", timeout=30_000)
            hidden_from = time.time() + 1.0
            page.wait_for_timeout(7500)
            assert node_ticks(requests, tick_fns, hidden_from) == 0

            page.get_by_role("tab", name=translate("tab.runs", "en")).click()
            page.wait_for_selector("#runs-node", state="visible", timeout=30_000)
            page.evaluate("""() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
                document.dispatchEvent(new Event('visibilitychange')); }""")
            hidden_from = time.time() + 1.0
            page.wait_for_timeout(7500)
            assert node_ticks(requests, tick_fns, hidden_from) == 0
            page.evaluate("""() => { delete document.hidden; document.dispatchEvent(new Event('visibilitychange')); }""")
            back = time.time()
            page.wait_for_timeout(1000)
            assert node_ticks(requests, tick_fns, back) >= 1  # at once when the browser tab is in front again
        finally:
            context.close()
