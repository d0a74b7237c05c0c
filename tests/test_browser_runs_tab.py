"""A run's numbers around Resume, and the Runs tab, in headless Chromium against the real app
(issue 27: items 5, 10, 11 and the delete confirmation of 15), in English and in Chinese.

- Around a Resume (a real demo run, stopped past a checkpoint and resumed, through the page):
  the progress line's step is always the loss chart's last step, even when the server answers
  the panel's own refresh late (a busy two-core machine: here each answer of that refresh is
  held back 1.5 s in the browser); once attempt 2 shows, the step counts on from its
  checkpoint and never goes back; the charts mark where attempt 2 began; the tokens per
  second are attempt 2's own; the memory chart breaks its line between the attempts.
- The runs table fits a 1,200-pixel window: its columns (the ones that matter), each header
  and cell whole, no word broken; a run's other settings open in its details.
- Compare draws its chart right under the table's buttons, in view; an empty queue shows no
  buttons, and Slurm only where a run used it.
- Delete asks in words for one run or for several, and can be cancelled.

One app for the module, over hand-built runs (laid out as LLaMA-Factory writes them, see
tests/test_resume.py) and the real runs the resume tests train. Every word is looked up with
`translate()`. Tests wait for states, never for a time.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from backend.i18n import translate
from backend.runs import OUTPUT_DIR
from backend.runs.logs import TRAINER_LOG
from tests.harness import AppServer, wait_until
from tests.test_browser_first_hour import LOCALES, fill, folded, plain, wait_for_text, wait_until_idle

pytestmark = pytest.mark.browser

UI_TIMEOUT_MS = 60_000
RUN_TIMEOUT_S = 420

# The panel's own refresh (Gradio's /run/predict, the hidden #live-refresh buttons) answered
# late, as on a busy machine; the watcher's route and the buttons' events are not held.
SLOW_PANEL_JS = """(() => {
    const original = window.fetch.bind(window);
    window.fetch = async (input, init) => {
        const url = typeof input === 'string' ? input : (input && input.url) || String(input);
        const response = await original(input, init);
        if (url.includes('/gradio_api/run/predict')) await new Promise((done) => setTimeout(done, 1500));
        return response;
    };
})();"""

# Every 50 ms, what a person reads: the progress line's words, the loss chart's last step and
# its marks, the memory chart's gaps (null points). A sample is kept when something changed.
RECORD_JS = """() => {
    const record = []; window.__resumeRecord = record;
    const look = () => {
        const text = (document.querySelector('#progress .rb-progress-text')?.innerText ?? '').split(/\\s+/).join(' ').trim();
        const loss = document.querySelector('#loss-chart .js-plotly-plot');
        const x = loss && loss.data && loss.data[0] ? Array.from(loss.data[0].x || []) : [];
        const marks = loss && loss.layout ? (loss.layout.annotations || []).map(a => [a.x, a.text]) : [];
        const memory = document.querySelector('#memory-chart .js-plotly-plot');
        const used = memory && memory.data && memory.data[0] ? Array.from(memory.data[0].y || []) : [];
        const sample = {t: Math.round(performance.now()), text, last: x.length ? x[x.length - 1] : null, marks: JSON.stringify(marks),
                        gaps: used.filter(v => v === null).length, readings: used.length};
        const before = record[record.length - 1];
        if (!before || ['text', 'last', 'marks', 'gaps', 'readings'].some(k => before[k] !== sample[k])) record.push(sample);
    };
    look();
    window.__resumeTimer = setInterval(look, 50);
}"""


# --- the app ----------------------------------------------------------------------------------

LONG_NAME = "a-rather-long-run-name-for-the-table"
CHINESE_NAME = "水果实验"
SCORES = {"predict_bleu-4": 41.6, "predict_rouge-1": 50.2, "predict_rouge-2": 30.1, "predict_rouge-l": 44.9, "predict_runtime": 3.0}


def hand_made_runs(runs_dir: Path) -> dict[str, str]:
    """Finished and stopped runs as LLaMA-Factory and RocBoard leave them (tests/test_resume.py
    make_run): one resumed once ("finished (attempt 2)"), one evaluated (its scores), one with a
    long name, one with a Chinese name. {what: run id}."""
    from backend.runs import FORM_FILE, RunStore
    from backend.service import demo_form
    from tests.test_resume import make_run

    store = RunStore(runs_dir)
    runs = {}
    runs["resumed"] = make_run(store, state="finished", logged=30)
    store.update(runs["resumed"], attempts=2, started_at=1000.0, ended_at=1060.0)
    time.sleep(1.05)  # run ids are to the second
    runs["stopped"] = make_run(store, state="stopped", logged=13)
    evaluation = store.create("eval", "cpu-demo", "/models/tiny", {}, kind="evaluate", source_run=runs["resumed"], state="finished")
    (store.run_dir(evaluation.id) / OUTPUT_DIR).mkdir()
    (store.run_dir(evaluation.id) / OUTPUT_DIR / "predict_results.json").write_text(json.dumps(SCORES))
    store.update(evaluation.id, started_at=2000.0, ended_at=2011.0, pid=None, pid_started=None)
    runs["evaluation"] = evaluation.id
    time.sleep(1.05)
    for key, name in (("long", LONG_NAME), ("chinese", CHINESE_NAME)):
        run_id = make_run(store, state="finished", logged=20)
        store.update(run_id, name=name)
        runs[key] = run_id
        time.sleep(1.05)
    # The form each was started from, as the app writes it: "New run from these settings"
    # on the newest gives the demo's form.
    for run_id in (runs["resumed"], runs["stopped"], runs["long"], runs["chinese"]):
        (store.run_dir(run_id) / FORM_FILE).write_text(json.dumps({**demo_form(), "run_name": store.read(run_id).name}))
    return runs


@pytest.fixture(scope="module")
def server_and_runs(demo_assets, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("runs-tab-app")
    runs = hand_made_runs(workdir / "runs")
    server = AppServer(workdir=workdir).start()
    try:
        yield server, runs
    finally:
        server.stop()


@pytest.fixture(scope="module")
def app_server(server_and_runs):
    return server_and_runs[0]


@pytest.fixture(scope="module")
def made_runs(server_and_runs):
    return server_and_runs[1]


def open_page(chromium, server, browser_locale: str, width: int = 1400, init_script: str | None = None):
    context = chromium.new_context(locale=browser_locale, color_scheme="light", viewport={"width": width, "height": 1000})
    if init_script:
        context.add_init_script(init_script)
    page = context.new_page()
    page.goto(f"{server.url}/?__theme=light")
    page.wait_for_selector("#start", timeout=UI_TIMEOUT_MS)
    page.wait_for_function(
        "(text) => document.querySelector('#start').innerText.trim() === text", arg=translate("button.start", LOCALES[browser_locale]), timeout=UI_TIMEOUT_MS
    )
    wait_until_idle(page)
    return context, page


def new_run_form(page) -> None:
    """An editable form: "New run from these settings" pressed once the page shows a run's
    (pressed again if the press landed before the page's load event was done)."""

    def editable() -> bool:
        if page.evaluate("() => { const e = document.querySelector('#run-name input, #run-name textarea'); return !!e && !e.disabled; }"):
            return True
        if page.locator("#new-run").is_visible():
            from playwright.sync_api import TimeoutError as PlaywrightTimeout

            try:
                # Short: the button hides once a press landed (the form turns editable), and a
                # press on it as it goes waits for it to come back, which it never does.
                page.locator("#new-run").click(timeout=3000)
            except PlaywrightTimeout:
                pass
        return False

    wait_until(editable, UI_TIMEOUT_MS / 1000, interval=0.5, what="an editable form")
    wait_until_idle(page)


def log_records(server, run_id: str) -> list[dict]:
    try:
        text = (server.runs_dir / run_id / OUTPUT_DIR / TRAINER_LOG).read_text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def last_step(server, run_id: str) -> int:
    return max((r["current_steps"] for r in log_records(server, run_id) if isinstance(r.get("current_steps"), int)), default=0)


def state_of(server, run_id: str) -> dict:
    return next(s for s in server.runs() if s["id"] == run_id)


def resumed_checkpoint(server, run_id: str) -> tuple[int, int] | None:
    """(step, tokens counted) of the checkpoint the run's last resume started from, from its
    state.json and the checkpoint's trainer_state.json; None before the resume."""
    resumed_from = state_of(server, run_id).get("resumed_from") or ""
    if not resumed_from:
        return None
    saved = json.loads((server.runs_dir / run_id / resumed_from / "trainer_state.json").read_text())
    return saved["global_step"], saved["num_input_tokens_seen"]


def attempt_2_records(server, run_id: str) -> list[dict]:
    """The lines the resumed trainer wrote: the log after what attempt 1 left (its copy in
    attempts/1)."""
    archived = (server.runs_dir / run_id / "attempts" / "1" / OUTPUT_DIR / TRAINER_LOG).read_text().splitlines()
    return [r for r in log_records(server, run_id)[len(archived) :] if isinstance(r.get("current_steps"), int)]


# --- the Runs tab -------------------------------------------------------------------------------

# What a person sees of the runs table: the header and each cell that is drawn where it can be
# seen (Gradio keeps a hidden copy of the table to size its columns), with what is cut, what
# is hidden out of the table's box and which words are broken across lines.
TABLE_JS = """() => {
    const table = document.querySelector('#runs-table');
    const box = table.getBoundingClientRect();
    const seen = (cell) => {
        const r = cell.getBoundingClientRect();
        if (r.width === 0 || r.height === 0) return false;
        const at = document.elementFromPoint(r.left + Math.min(r.width / 2, 8), r.top + r.height / 2);
        return !!at && cell.contains(at);
    };
    const pieces = (text) => text.split(/\\s+/).flatMap(t => /[\\u3000-\\u9fff\\uff00-\\uffef]/.test(t) ? [...t] : t.split(/(?<=-)/)).filter(p => p);
    const broken = (cell) => {
        // A word whose letters lie on two lines was broken inside (a line may end at a space
        // or after a hyphen; in Chinese between characters).
        const out = [];
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            let from = 0;
            for (const piece of pieces(node.textContent)) {
                const start = node.textContent.indexOf(piece, from);
                from = start + piece.length;
                const range = document.createRange();
                range.setStart(node, start); range.setEnd(node, start + piece.length);
                const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
                if (tops.size > 1) out.push(piece);
            }
        }
        return out;
    };
    const describe = (cell) => {
        const r = cell.getBoundingClientRect();
        const inner = cell.querySelector('span') || cell;
        return {
            text: cell.innerText.split(/\\s+/).join(' ').trim(),
            cut: inner.scrollWidth > inner.clientWidth + 1 || cell.scrollWidth > cell.clientWidth + 1,
            outside: r.right > box.right + 1 || r.left < box.left - 1,
            broken: broken(cell),
            lines: new Set([...cell.querySelectorAll('span')].flatMap(s => [...s.getClientRects()].map(q => Math.round(q.top)))).size,
        };
    };
    const headers = [...table.querySelectorAll('th')].filter(seen).map(describe);
    const rows = [...table.querySelectorAll('tbody tr')].filter(row => row.children.length && seen(row.children[0])).map(row => [...row.children].map(describe));
    const scroller = [...table.querySelectorAll('*')].find(e => e.scrollWidth > e.clientWidth + 1 && ['auto', 'scroll'].includes(getComputedStyle(e).overflowX));
    return {headers, rows, scrolls: !!scroller};
}"""


# The columns that matter, in the table; the others open in a run's details.
TABLE_COLUMNS = ("run", "name", "state", "where", "last_loss", "best_eval_loss", "scores", "duration", "started")


def open_runs_tab(page, locale: str) -> None:
    page.get_by_role("tab", name=translate("tab.runs", locale)).click()
    page.wait_for_selector("#runs-table", state="visible", timeout=UI_TIMEOUT_MS)
    wait_until_idle(page)


def choose(page, *run_ids: str) -> None:
    """Chooses exactly `run_ids` in the Runs tab's list."""
    for token in page.locator("#runs-chosen .token").all():
        token.locator(".token-remove").click()
    for run_id in run_ids:
        page.locator("#runs-chosen input").click()
        page.locator("#runs-chosen ul.options li", has_text=run_id).first.click()
        page.wait_for_selector(f"#runs-chosen .token:has-text('{run_id}')", timeout=UI_TIMEOUT_MS)
    page.mouse.click(5, 5)  # outside: closes the option list
    wait_until_idle(page)


def click_cell(page, text: str) -> None:
    """Clicks the table's cell that shows `text` where a person sees it (not Gradio's hidden
    copy of the table)."""
    at = page.evaluate(
        """(text) => { for (const cell of document.querySelectorAll('#runs-table tbody td')) {
            if (!cell.innerText.includes(text)) continue;
            const r = cell.getBoundingClientRect(); const x = r.left + r.width / 2, y = r.top + r.height / 2;
            const hit = document.elementFromPoint(x, y); if (hit && cell.contains(hit)) return [x, y]; } return null; }""",
        text,
    )
    assert at is not None, f"no cell showing {text!r} in view"
    page.mouse.click(*at)


def shown(page, selector: str) -> bool:
    return page.evaluate(
        "(sel) => { const e = document.querySelector(sel); if (!e) return false; const r = e.getBoundingClientRect();"
        " return r.width > 0 && r.height > 0 && e.checkVisibility({checkVisibilityCSS: true}); }",
        selector,
    )


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_the_runs_table_fits_a_1200_pixel_window_and_a_runs_details_open_when_chosen(app_server, made_runs, chromium, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    headers = [translate("eval.column.scores" if column == "scores" else f"runs.column.{column}", locale) for column in TABLE_COLUMNS]
    context, page = open_page(chromium, app_server, browser_locale, width=1200)
    try:
        open_runs_tab(page, locale)
        page.wait_for_function("(id) => document.querySelector('#runs-table').innerText.includes(id)", arg=made_runs["chinese"], timeout=UI_TIMEOUT_MS)
        table = page.evaluate(TABLE_JS)
        assert [h["text"] for h in table["headers"]] == [folded(h) for h in headers], [h["text"] for h in table["headers"]]
        assert not table["scrolls"], "the table needs a scroll bar to show its columns"
        for cell in [*table["headers"], *(c for row in table["rows"] for c in row)]:
            assert not cell["cut"] and not cell["outside"], f"{cell['text']!r} is cut or out of view: {cell}"
            assert not cell["broken"], f"{cell['text']!r} is broken inside a word: {cell['broken']}"
        by_run = {row[0]["text"].replace(" ", ""): row for row in table["rows"]}
        state = by_run[made_runs["resumed"]][TABLE_COLUMNS.index("state")]
        assert state["text"] == folded(translate("runs.state_attempt", locale, state=translate("state.finished", locale), attempts=2)) and state["lines"] == 1, state
        duration = by_run[made_runs["evaluation"]][TABLE_COLUMNS.index("duration")]
        from backend.runs.history import format_duration

        assert duration["text"] == folded(format_duration(11, locale)), duration  # in the page's words
        assert by_run[made_runs["chinese"]][TABLE_COLUMNS.index("name")]["text"] == CHINESE_NAME

        # The rest of a run (kind, preset, model, length, steps...) opens with it: chosen in the
        # list, or clicked in the table.
        choose(page, made_runs["resumed"])
        details = wait_for_text(page, "#runs-details", translate("runs.details", locale))
        length = translate("runs.length_steps", locale, steps=30)
        for column, value in (("kind", translate("eval.kind.train", locale)), ("preset", "cpu-demo"), ("model", "/models/tiny"), ("length", length), ("steps", "30 / 30")):
            label = translate(f"eval.column.{column}" if column == "kind" else f"runs.column.{column}", locale)
            assert re.search(rf"{re.escape(label)}\s+{re.escape(value)}", folded(details)), f"{label}: {value} not in {details!r}"
        click_cell(page, LONG_NAME)
        page.wait_for_selector(f"#runs-chosen .token:has-text('{made_runs['long']}')", timeout=UI_TIMEOUT_MS)
        details = wait_for_text(page, "#runs-details", made_runs["long"])
        assert made_runs["resumed"] in details and LONG_NAME in details
    finally:
        context.close()


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_compare_draws_in_view_and_an_empty_queue_shows_no_buttons(app_server, made_runs, chromium, browser_locale) -> None:
    from backend.slurm.client import SlurmClient

    locale = LOCALES[browser_locale]
    context, page = open_page(chromium, app_server, browser_locale, width=1200)
    try:
        open_runs_tab(page, locale)
        wait_for_text(page, "#queue", translate("queue.empty", locale))
        # Nothing waits here: no queue buttons; Slurm only where it is set up or was used.
        for control in ("#queue-pick", "#queue-up", "#queue-down", "#queue-cancel"):
            assert not shown(page, control), f"{control} is shown with an empty queue"
        slurm_words = translate("queue.slurm", locale)
        if not SlurmClient().configured():
            assert slurm_words not in page.locator("body").inner_text(), "the Slurm queue is shown on a machine without Slurm"

        choose(page, made_runs["resumed"], made_runs["stopped"])
        page.locator("#runs-compare").click()
        page.wait_for_function("() => !!document.querySelector('#runs-overlay .js-plotly-plot, #runs-overlay .plot-container')", timeout=UI_TIMEOUT_MS)
        wait_until_idle(page)
        page.locator("#runs-compare").scroll_into_view_if_needed()
        chart = page.locator("#runs-overlay").bounding_box()
        button = page.locator("#runs-compare").bounding_box()
        queue = page.locator("#queue").bounding_box()
        assert chart is not None and button is not None and queue is not None
        assert chart["y"] < queue["y"], f"the chart is drawn below the queue: {chart} / {queue}"
        assert 0 <= chart["y"] - (button["y"] + button["height"]) < 250, f"the chart is not right under Compare: {chart} / {button}"
        assert chart["y"] + 100 < 1000, f"the chart's top is out of the window: {chart}"

        # A run that went to Slurm: the Slurm queue is shown.
        from backend.runs import RunStore
        from tests.test_resume import make_run

        store = RunStore(app_server.runs_dir)
        slurm_run = make_run(store, state="finished", logged=5)
        store.update(slurm_run, executor="slurm", job_id="4242")
        try:
            page.locator("#runs-refresh").click()
            wait_for_text(page, "#queue-slurm", slurm_words)
            assert shown(page, "#queue-slurm")
            assert translate("where.slurm", locale, job="4242") in wait_for_text(page, "#runs-table", "4242")
        finally:
            import shutil

            shutil.rmtree(store.run_dir(slurm_run))
    finally:
        context.close()


@pytest.mark.parametrize("browser_locale", LOCALES)
def test_delete_asks_for_one_run_or_for_several_and_can_be_cancelled(app_server, chromium, browser_locale) -> None:
    from backend.runs import RunStore
    from tests.test_resume import make_run

    locale = LOCALES[browser_locale]
    store = RunStore(app_server.runs_dir)
    doomed = []
    for _ in range(2):
        doomed.append(make_run(store, state="stopped", logged=5))
        time.sleep(1.05)  # run ids are to the second
    context, page = open_page(chromium, app_server, browser_locale, width=1200)
    try:
        open_runs_tab(page, locale)
        # The runs were made behind the app's back: Refresh reads them, as a person would press it.
        page.locator("#runs-refresh").click()
        wait_until_idle(page)
        wait_for_text(page, "#runs-table", doomed[-1])

        # One run: said of one run, and Cancel leaves it.
        choose(page, doomed[0])
        page.locator("#runs-delete").click()
        asked = wait_for_text(page, "#runs-message", plain(translate("runs.confirm_delete_one", locale, run=doomed[0])))
        assert plain(translate("runs.confirm_delete_one", locale, run=doomed[0])) in folded(asked), asked
        page.wait_for_selector("#runs-cancel-delete", state="visible", timeout=UI_TIMEOUT_MS)
        assert page.locator("#runs-cancel-delete").inner_text().strip() == translate("button.cancel_delete", locale)
        page.locator("#runs-cancel-delete").click()
        wait_for_text(page, "#runs-message", translate("runs.delete_cancelled", locale))
        page.wait_for_selector("#runs-confirm-delete", state="hidden", timeout=UI_TIMEOUT_MS)
        assert store.run_dir(doomed[0]).is_dir()

        # Two runs: said of two, then deleted.
        choose(page, *doomed)
        page.locator("#runs-delete").click()
        many = plain(translate("runs.confirm_delete_many", locale, count=2, runs=translate("actions.separator", locale).join(doomed)))
        assert many in folded(wait_for_text(page, "#runs-message", many))
        page.locator("#runs-confirm-delete").click()
        wait_for_text(page, "#runs-message", translate("runs.deleted", locale))
        wait_until(lambda: not any((app_server.runs_dir / run_id).exists() for run_id in doomed), 30, what="the two runs to be deleted")
        assert page.locator("#runs-cancel-delete").is_hidden()
    finally:
        context.close()


# --- 5. a run's numbers around Resume -----------------------------------------------------------


def step_pattern(locale: str) -> re.Pattern:
    """The progress line's "Step N / M" in `locale`, N captured."""
    marker = "\u0000"
    template = translate("progress.step", locale, step=marker, total=marker)
    return re.compile(re.escape(template).replace(marker, r"(\d+)", 1).replace(marker, r"\d+", 1))


def disagreements(samples: list[dict], pattern: re.Pattern) -> list[tuple[float, dict]]:
    """Each stretch of time the progress line's step and the loss chart's last step differed:
    (how long in ms, its first sample)."""
    stretches = []
    began: dict | None = None
    for sample in samples:
        found = pattern.search(sample["text"])
        differs = found is not None and sample["last"] is not None and int(found.group(1)) != sample["last"]
        if differs and began is None:
            began = sample
        elif not differs and began is not None:
            stretches.append((sample["t"] - began["t"], began))
            began = None
    if began is not None:
        stretches.append((samples[-1]["t"] - began["t"], began))
    return stretches


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("browser_locale", LOCALES)
def test_around_a_resume_the_step_tokens_per_second_and_memory_agree_with_the_charts(app_server, chromium, browser_locale) -> None:
    locale = LOCALES[browser_locale]
    context, page = open_page(chromium, app_server, browser_locale, init_script=SLOW_PANEL_JS)
    run_id = None
    try:
        new_run_form(page)
        # Long enough that it surely still trains when stopped; a checkpoint every 10 steps.
        fill(page, "max_steps", "5000")
        fill(page, "save_steps", "10")
        fill(page, "run_name", f"resume-numbers-{locale.lower()}")
        wait_until_idle(page)
        before = {s["id"] for s in app_server.runs()}
        page.evaluate(RECORD_JS)
        # Start acts once the live checks have passed (on a loaded machine they take a while).
        page.wait_for_function("() => !document.querySelector('#start').disabled", timeout=RUN_TIMEOUT_S * 1000)
        page.locator("#start").click()
        run_id = wait_until(lambda: next((s["id"] for s in app_server.runs() if s["id"] not in before), None), 180, what="the run to appear")

        # Attempt 1: stopped past its first checkpoint.
        wait_until(lambda: last_step(app_server, run_id) >= 14, RUN_TIMEOUT_S, 0.05, what="attempt 1 to pass step 14")
        page.wait_for_function("() => !document.querySelector('#stop').disabled", timeout=UI_TIMEOUT_MS)
        page.locator("#stop").click()
        wait_until(lambda: state_of(app_server, run_id)["state"] == "stopped", 120, what="attempt 1 to stop")
        page.wait_for_function("() => !document.querySelector('#resume').disabled", timeout=UI_TIMEOUT_MS)
        stopped_at = last_step(app_server, run_id)
        resumed_at = page.evaluate("() => (window.__resumedAt = performance.now())")

        # Attempt 2: resumed, trains a while, stopped again.
        page.locator("#resume").click()
        from_step, checkpoint_tokens = wait_until(lambda: resumed_checkpoint(app_server, run_id), 120, what="the resume")
        assert from_step <= stopped_at, (from_step, stopped_at)
        attempt_words = translate("progress.attempt", locale, attempt=2, step=from_step)
        wait_until(lambda: len(attempt_2_records(app_server, run_id)) >= 15, RUN_TIMEOUT_S, 0.05, what="attempt 2 to train 15 steps")
        # The page has drawn attempt 2 for a few ticks before it is stopped.
        page.wait_for_function(
            "(step) => { const plot = document.querySelector('#loss-chart .js-plotly-plot'); const x = plot && plot.data && plot.data[0] ? plot.data[0].x || [] : [];"
            " return window.__resumeRecord.filter(s => s.t > window.__resumedAt).length >= 5 && x.length > 0 && x[x.length - 1] >= step; }",
            arg=from_step + 10,
            timeout=UI_TIMEOUT_MS,
        )
        page.locator("#stop").click()
        wait_until(lambda: state_of(app_server, run_id)["state"] == "stopped", 120, what="attempt 2 to stop")
        wait_for_text(page, "#status", translate("state.stopped", locale))
        page.wait_for_timeout(2500)  # the last answers of the watcher and the panel land
        samples = page.evaluate("() => { clearInterval(window.__resumeTimer); return window.__resumeRecord; }")
    finally:
        context.close()
        if run_id is not None and state_of(app_server, run_id)["state"] in ("running", "starting"):
            from tests.test_browser_first_hour import stop_trainers

            stop_trainers(app_server)

    pattern = step_pattern(locale)
    shown = [s for s in samples if pattern.search(s["text"]) and s["last"] is not None]
    assert len(shown) >= 4, f"the page drew too little to compare: {samples}"
    # The step the line says is the loss chart's last step: never a reading behind or ahead
    # for longer than the moment between drawing one and writing the other.
    longest = max(disagreements(samples, pattern), default=(0, None), key=lambda stretch: stretch[0])
    assert longest[0] < 500, f"the progress line said another step than the chart for {longest[0]} ms from {longest[1]}"

    # From the moment attempt 2 shows, the step counts on from its checkpoint, never back.
    after = [s for s in samples if s["t"] > resumed_at and attempt_words in s["text"]]
    assert after, f"the progress line never said {attempt_words!r}: {[s['text'] for s in samples[-10:]]}"
    steps = [int(pattern.search(s["text"]).group(1)) for s in after]
    assert steps[0] >= from_step and steps == sorted(steps), steps
    assert steps[-1] > from_step + 5, steps
    # The loss chart marks where attempt 2 began: at its checkpoint's step, in words.
    mark = [from_step, translate("chart.attempt", locale, attempt=2)]
    assert mark in json.loads(after[-1]["marks"]), after[-1]["marks"]

    # Tokens per second: attempt 2's own (the tokens the checkpoint had counted taken off).
    last = [r for r in attempt_2_records(app_server, run_id) if r.get("throughput")][-1]
    own = last["throughput"] * (last["total_tokens"] - checkpoint_tokens) / last["total_tokens"]
    rate = translate("progress.throughput", locale, rate=f"{own:,.0f}")
    final = samples[-1]["text"]
    assert rate in final, f"{final!r} does not say {rate!r} (LLaMA-Factory's own count: {last['throughput']:,.0f})"

    # The memory chart breaks its line between the attempts: no line across the time no
    # training process existed.
    assert samples[-1]["readings"] > 2 and samples[-1]["gaps"] >= 1, samples[-1]
