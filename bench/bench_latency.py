"""Latency: app start, page ready, and a new loss line to the point on screen.

1. App start to serving: `python app.py` spawned to its first HTTP 200 (and where that time
   goes: Python + gradio import, RocBoard's own imports, building the page, launching).
2. Page ready in headless Chromium, on a runs dir holding a run that is training: from
   navigation to the Start button usable, and to the loss chart drawn with the run's points.
   The first load right after the server answered is shown apart (the server's start-up
   helpers are still running then). Goal: under 2 s.
3. A line appended to the run's trainer_log.jsonl to its point drawn in the open tab's loss
   chart, at a random moment relative to the page's 1 s refresh. Goal: every point within
   the refresh interval + 0.5 s = 1.5 s.

The training run is a stand-in (`sleep`) so that the timing is the page's alone; the real
trainer is measured in bench_overhead and bench_first_loss.
`python -m bench.bench_latency [--quick]`.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import (
    LOSS_CHART_LAST_STEP_JS,
    LOSS_CHART_POINTS_JS,
    Workspace,
    bench_arguments,
    conditions,
    conditions_line,
    fake_run,
    goal_row,
    helpers_settled,
    rocboard_server,
    show,
    spread,
    trainer_log_line,
)
from tests.harness import PYTHON, ROOT, chromium_browser, kill_tree

REFRESH_S = 1.0  # ui/train_tab.py TICK_S
LATENCY_GOAL_S = REFRESH_S + 0.5
PAGE_READY_GOAL_S = 2.0
CHART_READY_GOAL_S = 1.5
HISTORY_POINTS = 30

# Where app start goes, measured in a fresh interpreter the way serve_main does it.
START_BREAKDOWN_SCRIPT = r"""
import json, os, shutil, tempfile, time
from pathlib import Path
t0 = time.perf_counter()
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
import gradio
t1 = time.perf_counter()
from backend.service import RocBoard
from ui.app import build_ui
t2 = time.perf_counter()
work = Path(tempfile.mkdtemp(prefix="bench-start-"))
board = RocBoard(work / "runs", export_dir=work / "exports")
t3 = time.perf_counter()
page = build_ui(board)
t4 = time.perf_counter()
shutil.rmtree(work, ignore_errors=True)
print(json.dumps({"import_gradio": t1 - t0, "import_rocboard": t2 - t1, "board": t3 - t2, "build_page": t4 - t3}))
"""


def interpreter_start_s() -> float:
    started = time.perf_counter()
    subprocess.run([PYTHON, "-c", "pass"], check=True)
    return time.perf_counter() - started


def start_breakdown() -> dict[str, float]:
    started = time.perf_counter()
    out = subprocess.run([PYTHON, "-c", START_BREAKDOWN_SCRIPT], capture_output=True, text=True, timeout=300, cwd=ROOT)
    total = time.perf_counter() - started
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    phases = json.loads(out.stdout.strip().splitlines()[-1])
    phases["interpreter_and_exit"] = total - sum(phases.values())
    return phases


# When the page's first data message and plotly.js arrived, in seconds from navigation
# start: the chart cannot be drawn before both. plotly.js is RocBoard's own copy
# (ui/live.py, fetched as the page opens), no longer Gradio's chunk loaded on demand.
RESOURCE_TIMES_JS = """() => {
  const entries = performance.getEntriesByType('resource');
  const find = (part) => entries.find(e => e.name.includes(part));
  const plotly = find('rocboard/plotly.min.js');
  const data = find('/data?session_hash');
  return {
    first_data_s: data ? data.responseEnd / 1000 : null,
    plotly_js_start_s: plotly ? plotly.startTime / 1000 : null,
    plotly_js_end_s: plotly ? plotly.responseEnd / 1000 : null,
    plotly_js_kib: plotly ? (plotly.encodedBodySize || plotly.transferSize) / 1024 : null,
  };
}"""


def page_load(browser: Any, url: str, points: int, warm_cache: bool = False) -> dict[str, float]:
    """One tab: navigation to the page usable (Stop usable: it shows a run that trains,
    read-only; a new run's Start waits for that run), and to the loss chart drawn. A fresh browser
    profile each time, or (warm_cache) one that loaded the page once already, as a
    returning user's browser has Gradio's scripts cached."""
    context = browser.new_context()
    try:
        page = context.new_page()
        if warm_cache:
            page.goto(url)
            page.wait_for_function(f"() => ({LOSS_CHART_POINTS_JS})() >= {points}", polling=50, timeout=60_000)
            page = context.new_page()
        started = time.monotonic()
        page.goto(url)
        page.wait_for_selector("#stop:not([disabled])", state="visible", timeout=60_000)
        controls = time.monotonic() - started
        page.wait_for_function(f"() => ({LOSS_CHART_POINTS_JS})() >= {points}", polling=20, timeout=60_000)
        chart = time.monotonic() - started
        return {"controls_s": controls, "chart_s": chart, **page.evaluate(RESOURCE_TIMES_JS)}
    finally:
        context.close()


def append_to_visible(page: Any, trainer_log: Path, first_step: int, repeats: int, total_steps: int) -> list[float]:
    """Appends one line at a random phase of the refresh and times it to the drawn point."""
    latencies = []
    rng = random.Random(7)
    with open(trainer_log, "a", encoding="utf-8") as log:
        for step in range(first_step, first_step + repeats):
            time.sleep(rng.uniform(0.3, 0.3 + REFRESH_S))
            log.write(trainer_log_line(step, total_steps))
            log.flush()
            appended = time.monotonic()
            page.wait_for_function(f"() => (({LOSS_CHART_LAST_STEP_JS})() || 0) >= {step}", polling=20, timeout=30_000)
            latencies.append(time.monotonic() - appended)
    return latencies


def run(quick: bool = False) -> dict[str, Any]:
    start_repeats = 1 if quick else 3
    page_repeats = 2 if quick else 5
    warm_repeats = 1 if quick else 3
    latency_repeats = 4 if quick else 12
    serving, announced, breakdowns, stand_ins = [], [], [], []
    result: dict[str, Any] = {"name": "latency", "conditions": conditions()}
    python_start = [interpreter_start_s() for _ in range(3)]
    with Workspace("bench-latency-") as workdir:
        try:
            for index in range(start_repeats):
                runs_dir = workdir / f"app-{index}" / "runs"
                runs_dir.mkdir(parents=True)
                run_id, trainer_log, stand_in = fake_run(runs_dir, HISTORY_POINTS, active=True)
                stand_ins.append(stand_in)
                server = rocboard_server(workdir / f"app-{index}")
                server.start()
                serving.append(server.serving_after_s)
                announced.append(server.announced_after_s)
                if index < start_repeats - 1:
                    server.stop()
                    breakdowns.append(start_breakdown())
            # The last server stays up for the page and latency figures.
            try:
                with chromium_browser() as browser:
                    first_load = page_load(browser, server.url, HISTORY_POINTS)
                    settle_s = helpers_settled(server.pid)
                    page_load(browser, server.url, HISTORY_POINTS)  # warm-up, not counted
                    loads = [page_load(browser, server.url, HISTORY_POINTS) for _ in range(page_repeats)]
                    warm_loads = [page_load(browser, server.url, HISTORY_POINTS, warm_cache=True) for _ in range(warm_repeats)]
                    context = browser.new_context()
                    page = context.new_page()
                    page.goto(server.url)
                    page.wait_for_function(f"() => ({LOSS_CHART_POINTS_JS})() >= {HISTORY_POINTS}", polling=50, timeout=60_000)
                    latencies = append_to_visible(page, trainer_log, HISTORY_POINTS + 1, latency_repeats, HISTORY_POINTS * 10)
                    context.close()
            finally:
                server.stop()
            breakdowns.append(start_breakdown())
        finally:
            for stand_in in stand_ins:
                kill_tree(stand_in.pid)
    phases = {name: spread([b[name] for b in breakdowns]) for name in breakdowns[0]}
    result.update(
        serving=spread(serving),
        announced=spread(announced),
        warm_controls=spread([load["controls_s"] for load in warm_loads]),
        warm_chart=spread([load["chart_s"] for load in warm_loads]),
        python_start=spread(python_start),
        start_phases=phases,
        first_load=first_load,
        helpers_settled_after_s=settle_s,
        controls=spread([load["controls_s"] for load in loads]),
        chart=spread([load["chart_s"] for load in loads]),
        first_data=spread([load["first_data_s"] for load in loads if load.get("first_data_s") is not None]),
        plotly_js_start=spread([load["plotly_js_start_s"] for load in loads if load.get("plotly_js_start_s") is not None]),
        plotly_js_end=spread([load["plotly_js_end_s"] for load in loads if load.get("plotly_js_end_s") is not None]),
        plotly_js_kib=max((load.get("plotly_js_kib") or 0) for load in loads),
        latency=spread(latencies),
        latencies=latencies,
    )
    latency, chart = result["latency"], result["chart"]
    result["goals"] = [
        goal_row("app start to serving (`python app.py` to first HTTP 200)", "-", show(result["serving"], "s"), None),
        goal_row("page ready: Stop usable (the run shown trains)", "< 2 s", show(result["controls"], "s"), result["controls"]["median"] < PAGE_READY_GOAL_S),
        goal_row("cold page -> loss chart drawn with the run's 30 points", "< 1.5 s", show(chart, "s"), chart["median"] < CHART_READY_GOAL_S),
        goal_row("page ready, browser cache warm: loss chart drawn", "< 2 s", show(result["warm_chart"], "s"), result["warm_chart"]["median"] < PAGE_READY_GOAL_S),
        goal_row("first page load right after start (helpers still running)", "-", f"Stop usable {first_load['controls_s']:.2f} s, chart {first_load['chart_s']:.2f} s", None),
        goal_row("loss line appended -> point drawn (1 s refresh)", "<= 1.5 s, every time", f"{show(latency, 's')}; max {latency['max']:.2f} s", latency["max"] <= LATENCY_GOAL_S),
    ]
    return result


PHASE_NAMES = {
    "import_gradio": "import gradio",
    "import_rocboard": "import RocBoard (backend.service, ui.app)",
    "board": "RocBoard(runs_dir): presets, runs dir",
    "build_page": "build_ui: the Blocks page",
    "interpreter_and_exit": "interpreter start and exit",
}


def report(result: dict[str, Any]) -> str:
    latency = result["latency"]
    lines = [
        f"App start to serving (`python app.py`, spawn to first HTTP 200): {show(result['serving'], 's')}",
        f"  of which before it printed its URL (imports, page built; Gradio's launch follows): {show(result['announced'], 's')}",
        "  where it goes (a fresh interpreter doing serve_main's imports and page build, no launch):",
        *[f"    {PHASE_NAMES.get(name, name):<45} {show(summary, 's')}" for name, summary in result["start_phases"].items()],
        f"    (a bare `python -c pass`: {show(result['python_start'], 's')}; the rest of serving is Gradio's launch,"
        " the sampler, the doctor's probe thread and the first request)",
        "Page ready in headless Chromium, fresh profile each load (a run training, 30 points of history):",
        f"  Stop usable:        {show(result['controls'], 's')}  -> {'OK' if result['controls']['median'] < PAGE_READY_GOAL_S else 'NOT'} under 2 s",
        f"  loss chart drawn:   {show(result['chart'], 's')}  -> {'OK' if result['chart']['median'] < CHART_READY_GOAL_S else 'NOT'} under {CHART_READY_GOAL_S:g} s",
        f"  on the way to the chart (medians from navigation): first data message {result['first_data']['median']:.2f} s;"
        f" plotly.js ({result['plotly_js_kib']:.0f} KiB as sent) requested at {result['plotly_js_start']['median']:.2f} s, loaded at"
        f" {result['plotly_js_end']['median']:.2f} s; chart drawn at {result['chart']['median']:.2f} s"
        if result["plotly_js_end"].get("n") and result["first_data"].get("n") else "  (resource timings not available)",
        *(
            [
                f"  why the chart is not sooner: it is drawn as the page becomes usable (Stop usable {result['controls']['median']:.2f} s):"
                " plotly.js and the run's charts are in before Gradio has built the page and run its load event in the browser"
            ]
            if result["chart"]["median"] >= CHART_READY_GOAL_S
            else []
        ),
        f"  browser cache warm (a returning tab): Stop {show(result['warm_controls'], 's')}; chart {show(result['warm_chart'], 's')}",
        f"  first load right after the server answered: Stop {result['first_load']['controls_s']:.2f} s, chart {result['first_load']['chart_s']:.2f} s"
        f" (the server's start-up helpers settled {result['helpers_settled_after_s']:.1f} s later)",
        f"Loss line appended -> point drawn in the open tab (1 s refresh): {show(latency, 's')}",
        f"  each: {[round(v, 2) for v in result['latencies']]}",
        f"  max {latency['max']:.2f} s -> {'OK' if latency['max'] <= LATENCY_GOAL_S else 'NOT'} within {LATENCY_GOAL_S:g} s every time",
        f"Conditions: {conditions_line(result['conditions'])}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(quick=bench_arguments())))
