"""The node view's refresh cost with 8 runs live (issue 30): what the Runs tab's node panel
(ui/runs_tab.py: every 3 s while it shows, ui/live.js presses its hidden button, a Gradio event
asking RocBoard.node_markdown, not queued, sending nothing while unchanged)
costs the web process and a browser tab.

The real app (`python app.py --sysfs-root`, tests.harness.AppServer) on a simulated 8-GPU AMD
sysfs (backend/telemetry/fake_sysfs.py server_cards(8)): its node is the 8 GPUs it sees. Before
it starts, 8 runs are made as the run manager leaves them side by side (state running, the
trainer's pid and start time, launch.json holding one GPU each) with a stand-in trainer each
(a real Python process with that GPU in HIP_/CUDA_VISIBLE_DEVICES, appending a LLaMA-Factory
log line to its trainer_log.jsonl every 2 s); the app re-attaches to all 8 at start, as after a
restart (its own sampler follows the first, each other run gets one of its own). Windows of N
seconds, in turns, each round:

1. quiet, one headless Chromium tab on the Runs tab: the fake GPUs' readings steady and no
   log growing (each tick of the panel's timer finds the panel unchanged: it sends nothing);
2. live, the same tab: each GPU's busy % and VRAM change every second and every run's log
   grows (a node that trains: the panel is redrawn at each of its 3 s ticks);
3. live, no tab open, and 4. quiet, no tab open: the 8 runs' samplers and the app's own loops,
   the baselines the tab's windows are read against.

The web process's CPU is its own user + system time (bench.CpuMeter, psutil); the tab's is
Chromium's, summed over the processes this bench started, as bench_overhead takes it. The
page's requests in each window are counted by kind: the node panel's refreshes (presses of
its hidden button, each a Gradio event not queued), the Train tab's watcher (rocboard/live,
Resource Timing) and the other Gradio events (run/predict and queue/join: the watcher's, when
the run it follows grew). Goals (issue 30): web process < 2 % of one core and
tab <= 15 %, judged on the live window with the tab (the dearer case), the whole web process
(the samplers of 8 runs included).

`python -m bench.bench_node [--quick]`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from bench import CpuMeter, TimedAppServer, Workspace, bench_arguments, conditions, conditions_line, goal_row, helpers_settled, show, spread
from tests.harness import PYTHON, ROOT, chromium_browser, fake_run, kill_tree, trainer_log_line, wait_until

GPUS = 8
GIB = 2**30
WEB_GOAL_PERCENT = 2.0
TAB_GOAL_PERCENT = 15.0
HISTORY_POINTS = 30
LOG_EVERY_S = 2.0
# A stand-in trainer: one LLaMA-Factory log line every LOG_EVERY_S into its trainer_log.jsonl.
# While the pause file exists it writes nothing (the "quiet" windows: no log grows).
STAND_IN = (
    "import os, sys, time\n"
    "from tests.harness import trainer_log_line\n"
    "path, step, every, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]\n"
    "while True:\n"
    "    time.sleep(every)\n"
    "    if os.path.exists(pause):\n"
    "        continue\n"
    "    step += 1\n"
    "    with open(path, 'a', encoding='utf-8') as log:\n"
    "        log.write(trainer_log_line(step, 100000))\n"
)
# How often the node panel's text changed in the page: a MutationObserver on #runs-node that
# counts a change of its Markdown's text (not of Gradio's status tracker beside it).
WATCH_PANEL_JS = """() => {
  window.__nodeChanges = 0;
  const box = document.querySelector('#runs-node');
  const text = () => (box.querySelector('.prose') ?? box).innerText;
  let last = text();
  new MutationObserver(() => { const now = text(); if (now !== last) { last = now; window.__nodeChanges += 1; } })
    .observe(box, {subtree: true, childList: true, characterData: true});
  // the panel's refresh: each press of its hidden button (ui/live.js)
  window.__nodeTicks = 0;
  document.getElementById('runs-node-tick')?.addEventListener('click', () => { window.__nodeTicks += 1; });
  // the Train tab's charts (hidden while the Runs tab shows): each batch of changes to them
  window.__chartRedraws = 0;
  for (const id of ['loss-chart', 'memory-chart']) {
    const chart = document.getElementById(id);
    if (chart) new MutationObserver(() => { window.__chartRedraws += 1; }).observe(chart, {subtree: true, childList: true, attributes: true});
  }
}"""
PANEL_TEXT_JS = "() => { const box = document.querySelector('#runs-node'); return box ? (box.querySelector('.prose') ?? box).innerText : ''; }"


def live_runs(runs_dir: Path, pause: Path) -> list[tuple[str, subprocess.Popen]]:
    """8 runs as the run manager leaves them side by side, one GPU each, each with its
    stand-in trainer (its own session, as the launcher starts trainers)."""
    from backend.runs import LAUNCH_FILE, RunStore
    from backend.runs.queue import launch_file
    from backend.service import demo_form

    store = RunStore(runs_dir)
    made = []
    for gpu in range(GPUS):
        files = {"config.yaml": "", "form.json": json.dumps(demo_form()), "train.log": "", LAUNCH_FILE: launch_file({}, 1, (gpu,))}
        state = store.create(name=f"lr-{gpu + 1}e-4", preset="cpu-demo", model="demo", files=files)
        output_dir = runs_dir / state.id / "output"
        output_dir.mkdir()
        trainer_log = output_dir / "trainer_log.jsonl"
        trainer_log.write_text("".join(trainer_log_line(step, 100000) for step in range(1, HISTORY_POINTS + 1)), encoding="utf-8")
        env = {**os.environ, "HIP_VISIBLE_DEVICES": str(gpu), "CUDA_VISIBLE_DEVICES": str(gpu)}
        stand_in = subprocess.Popen(
            [PYTHON, "-c", STAND_IN, str(trainer_log), str(HISTORY_POINTS), str(LOG_EVERY_S), str(pause)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        store.update(state.id, state="running", pid=stand_in.pid, pid_started=psutil.Process(stand_in.pid).create_time(), started_at=time.time())
        made.append((state.id, stand_in))
    return made


def set_readings(sysfs: Path, tick: int) -> None:
    """Each GPU's busy % and VRAM as a training node's move (a different value each tick)."""
    from backend.telemetry.fake_sysfs import set_load

    set_load(sysfs, {gpu: ((20 + (gpu * 3 + tick) % 7) * GIB, 60 + (gpu * 11 + tick * 17) % 40) for gpu in range(GPUS)})


# The page's requests so far, by kind.
REQUESTS_JS = """() => {
  const names = performance.getEntriesByType('resource').map(e => e.name);
  const count = part => names.filter(n => n.includes(part)).length;
  // the panel's ticks are Gradio events too (not queued): counted by its button, and left out of the rest
  const ticks = window.__nodeTicks || 0;
  return {node_ticks: ticks, live_ticks: count('/rocboard/live?'), gradio_events: Math.max(0, count('/run/predict') + count('/queue/join') - ticks)};
}"""


def window(server_pid: int, seconds: float, sysfs: Path, pause: Path, live: bool, page: Any = None) -> dict[str, Any]:
    """CPU of the web process and the browser over one window; live: the readings change
    every second and the logs grow, else both stay as they are."""
    if live:
        pause.unlink(missing_ok=True)
    else:
        pause.touch()
    asked_before = page.evaluate(REQUESTS_JS) if page is not None else {}
    changes_before = page.evaluate("() => window.__nodeChanges") if page is not None else 0
    charts_before = page.evaluate("() => window.__chartRedraws") if page is not None else 0
    with CpuMeter(server_pid, with_browser=page is not None) as meter:
        deadline = time.monotonic() + seconds
        tick = 0
        while time.monotonic() < deadline:
            if live:
                tick += 1
                set_readings(sysfs, tick)
            time.sleep(1.0)
    figures: dict[str, Any] = {
        "wall_s": meter.wall_s,
        "cpu_s": meter.cpu_s,
        "cpu_percent": meter.cpu_percent,
        "browser_cpu_percent": meter.browser_cpu_percent,
        "peak_rss_mib": meter.peak_rss / 2**20,
    }
    if page is not None:
        asked = page.evaluate(REQUESTS_JS)
        figures["requests"] = {kind: asked[kind] - asked_before[kind] for kind in asked}
        figures["panel_changes"] = page.evaluate("() => window.__nodeChanges") - changes_before
        figures["hidden_chart_changes"] = page.evaluate("() => window.__chartRedraws") - charts_before
    return figures


def open_runs_tab(browser: Any, url: str, run_ids: list[str]) -> tuple[Any, Any]:
    """A tab on the Runs tab, once its node panel names every run with its GPU's busy %."""
    from backend.i18n import translate

    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    page.evaluate("() => performance.setResourceTimingBufferSize(100000)")  # count every request
    page.get_by_role("tab", name=translate("tab.runs", "en")).click()
    page.wait_for_selector("#runs-node", state="visible", timeout=120_000)
    page.wait_for_function(
        f"() => {{ const t = ({PANEL_TEXT_JS})(); return {json.dumps(run_ids)}.every(id => t.includes(id)) && (t.match(/\\d+%/g) || []).length >= {GPUS}; }}",
        polling=500,
        timeout=120_000,
    )
    page.evaluate(WATCH_PANEL_JS)
    return context, page


ENDED_RUNS = 200


def panel_cost(runs_dir: Path, sysfs: Path, repeats: int) -> dict[str, dict[str, float]]:
    """What one tick of the panel's timer asks of RocBoard (RocBoard.node_markdown, in this
    process, the web process stopped): a RocBoard composed as ui/serve.py composes it (a
    sampler on the simulated sysfs, the node, re-attached to the 8 live runs, each run's
    sampler reading its GPU), timed once every GPU has a reading; then again with
    ENDED_RUNS ended runs beside them in the runs dir (a node's history). In ms per call."""
    from backend.service import RocBoard
    from backend.telemetry.sampler import Sampler

    sampler = Sampler(interval_s=1.0, sysfs_root=sysfs)
    sampler.start()
    board = RocBoard(runs_dir, sampler=sampler, export_dir=runs_dir.parent / "panel-exports", warm_helper=False)

    def timed() -> dict[str, float]:
        durations = []
        for _ in range(repeats):
            started = time.perf_counter()
            board.node_markdown("en")
            durations.append((time.perf_counter() - started) * 1000)
            time.sleep(0.005)
        return spread(durations)

    try:
        board.set_node(tuple(range(GPUS)))
        board.reattach()
        wait_until(lambda: (board.node_markdown("en") or "").count("%") >= GPUS, 30, interval=0.2, what="every GPU's reading in the panel")
        costs = {"live_only": timed()}
        for _ in range(ENDED_RUNS):
            fake_run(runs_dir, 3, active=False)
        costs["with_ended"] = timed()
        return costs
    finally:
        own = [board.run_manager.sampler_of(run_id) for run_id in board.run_ids()]
        board.close()
        for each in {id(s): s for s in [sampler, *own] if s is not None}.values():
            each.stop()


WINDOWS = ("quiet_tab", "live_tab", "live_no_tab", "quiet_no_tab")


def run(quick: bool = False) -> dict[str, Any]:
    from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards

    seconds = 9.0 if quick else 20.0
    rounds = 1 if quick else 2
    result: dict[str, Any] = {"name": "node", "conditions": conditions(), "gpus": GPUS, "window_s": seconds, "rounds": rounds}
    windows: dict[str, list[dict[str, Any]]] = {name: [] for name in WINDOWS}
    with Workspace("bench-node-") as workdir:
        sysfs = build_fake_sysfs(workdir / "sys", server_cards(GPUS), bmc_vga=False)
        set_readings(sysfs, 0)
        pause = workdir / "pause"
        pause.touch()
        server = TimedAppServer("--sysfs-root", str(sysfs), "--no-warm-start", workdir=workdir / "app")
        runs = live_runs(server.runs_dir, pause)
        run_ids = [run_id for run_id, _ in runs]
        try:
            server.start()
            result["serving_after_s"] = server.serving_after_s
            result["helpers_settled_after_s"] = helpers_settled(server.pid)
            with chromium_browser() as browser:
                for _ in range(rounds):
                    context, page = open_runs_tab(browser, server.url, run_ids)
                    result.setdefault("panel", page.evaluate(PANEL_TEXT_JS))
                    time.sleep(4.0)  # past the tab's first renders
                    windows["quiet_tab"].append(window(server.pid, seconds, sysfs, pause, live=False, page=page))
                    windows["live_tab"].append(window(server.pid, seconds, sysfs, pause, live=True, page=page))
                    context.close()
                    windows["live_no_tab"].append(window(server.pid, seconds, sysfs, pause, live=True))
                    windows["quiet_no_tab"].append(window(server.pid, seconds, sysfs, pause, live=False))
            result["still_live"] = sum(1 for _, stand_in in runs if stand_in.poll() is None)
            result["still_running"] = sum(1 for state in server.runs() if state["state"] == "running")
            # the app ends (SIGTERM, as ui/serve.py stops); its trainers go on, for the panel's own cost
            os.killpg(server.pid, signal.SIGTERM)
            psutil.Process(server.pid).wait(timeout=30)
            result["panel_ms"] = panel_cost(server.runs_dir, sysfs, repeats=50 if quick else 200)
        finally:
            server.stop()
            for _, stand_in in runs:
                kill_tree(stand_in.pid)
    result["windows"] = windows
    summarize(result)
    return result


def summarize(result: dict[str, Any]) -> None:
    windows = result["windows"]
    web = {name: spread([w["cpu_percent"] for w in windows[name]]) for name in WINDOWS}
    tab = {name: spread([w["browser_cpu_percent"] for w in windows[name]]) for name in ("quiet_tab", "live_tab")}
    added = {kind: spread([a["cpu_percent"] - b["cpu_percent"] for a, b in zip(windows[f"{kind}_tab"], windows[f"{kind}_no_tab"], strict=True)]) for kind in ("quiet", "live")}
    result.update(web=web, tab=tab, added_by_tab=added)
    web_met = web["live_tab"]["median"] < WEB_GOAL_PERCENT
    tab_met = tab["live_tab"]["median"] <= TAB_GOAL_PERCENT
    changes = [w["panel_changes"] for w in windows["live_tab"]]
    result["verdicts"] = {"web": web_met, "tab": tab_met}
    result["goals"] = [
        goal_row(f"web process CPU, {GPUS} runs live, no tab open (their samplers, the app's loops), readings changing", "-", show(web["live_no_tab"], "%", digits=2), None),
        goal_row(
            f"web process CPU, a tab on the node panel, {GPUS} runs live, readings changing each second, logs growing",
            f"< {WEB_GOAL_PERCENT:g} % of one core",
            show(web["live_tab"], "%", digits=2) + f"; panel redrawn {changes} times per window",
            web_met,
        ),
        goal_row("web process CPU the tab adds (tab minus no tab): live / quiet", "-", f"{show(added['live'], '%', digits=2)} / {show(added['quiet'], '%', digits=2)}", None),
        goal_row(f"web process CPU, a tab on the node panel, {GPUS} runs live, readings steady, no log growing", "-", show(web["quiet_tab"], "%", digits=2), None),
        goal_row(f"Chromium tab CPU on the node panel, {GPUS} runs live, readings changing, logs growing", f"<= {TAB_GOAL_PERCENT:g} % of one core", show(tab["live_tab"], "%", digits=1), tab_met),
        goal_row("Chromium tab CPU on the node panel, readings steady, no log growing", "-", show(tab["quiet_tab"], "%", digits=1), None),
        goal_row(f"one tick of the panel: RocBoard.node_markdown, {GPUS} runs live (in-process)", "-", show(result["panel_ms"]["live_only"], "ms", digits=2), None),
        goal_row(f"the same with {ENDED_RUNS} ended runs in the runs dir", "-", show(result["panel_ms"]["with_ended"], "ms", digits=2), None),
    ]


def why_lines(result: dict[str, Any]) -> list[str]:
    """Where the tab's cost goes, from the window's own counts: the panel's ticks (their
    RocBoard part timed in-process) against the Train tab's watcher, hidden while the Runs tab
    shows (ui/live.js pauses then: it should ask nothing and press nothing)."""
    live = result["windows"]["live_tab"]
    seconds = result["window_s"]

    def median_of(key: str, inner: str | None = None) -> float:
        return spread([(w[key][inner] if inner else w[key]) for w in live])["median"]

    ticks, asked, events = median_of("requests", "node_ticks"), median_of("requests", "live_ticks"), median_of("requests", "gradio_events")
    charts = median_of("hidden_chart_changes")
    panel_share = 100 * ticks * result["panel_ms"]["live_only"]["median"] / 1000 / seconds
    return [
        f"  where it goes (live window, medians): {ticks:.0f} node-panel ticks ({seconds / max(ticks, 1):.1f} s apart) whose RocBoard part is ~{panel_share:.2f} % of a core;"
        f" from the hidden Train tab's watcher {asked:.0f} questions, {events:.0f} Gradio events and {charts:.0f} changes of its loss/memory charts"
        " (it pauses while its tab is hidden: ui/live.js). The no-tab baseline, the 8 runs'"
        f" samplers and decision loops, is {result['web']['live_no_tab']['median']:.2f} % by itself"
    ]


LABELS = {
    "quiet_tab": "tab on Runs, quiet (readings steady, no log)",
    "live_tab": "tab on Runs, live (readings change, logs grow)",
    "live_no_tab": "no tab, live",
    "quiet_no_tab": "no tab, quiet",
}


def report(result: dict[str, Any]) -> str:
    lines = [
        f"The node view with {result['gpus']} runs live (stand-in trainers the app re-attached to at its start, one simulated GPU"
        f" each, a log line every {LOG_EVERY_S:g} s each while live), windows of {result['window_s']:.0f} s, {result['rounds']} round(s) in turns;"
        f" app serving after {result['serving_after_s']:.1f} s, helpers settled {result['helpers_settled_after_s']:.0f} s after start:",
    ]
    for name in WINDOWS:
        for index, w in enumerate(result["windows"][name]):
            extra = ""
            if "requests" in w:
                asked = w["requests"]
                extra = (
                    f", tab {w['browser_cpu_percent']:.1f} %; panel redrawn {w['panel_changes']} times; requests: {asked['node_ticks']} node-panel ticks,"
                    f" {asked['live_ticks']} watcher ticks, {asked['gradio_events']} Gradio events; the hidden Train tab's charts changed in {w['hidden_chart_changes']} batches"
                )
            lines.append(f"  {LABELS[name]:<48} #{index + 1}: web {w['cpu_percent']:5.2f} % ({1000 * w['cpu_s']:.0f} ms CPU over {w['wall_s']:.0f} s){extra}, RSS {w['peak_rss_mib']:.0f} MiB")
    web, tab, added = result["web"], result["tab"], result["added_by_tab"]
    verdicts = result["verdicts"]
    lines += [
        f"  web process, live: tab {show(web['live_tab'], '%', digits=2)}, no tab {show(web['live_no_tab'], '%', digits=2)} (the tab adds {show(added['live'], '%', digits=2)})"
        f" -> {'OK' if verdicts['web'] else 'NOT'} under {WEB_GOAL_PERCENT:g} % of one core",
        f"  web process, quiet: tab {show(web['quiet_tab'], '%', digits=2)}, no tab {show(web['quiet_no_tab'], '%', digits=2)} (the tab adds {show(added['quiet'], '%', digits=2)})",
        f"  tab (Chromium): live {show(tab['live_tab'], '%', digits=1)}, quiet {show(tab['quiet_tab'], '%', digits=1)} -> {'OK' if verdicts['tab'] else 'NOT'} at most {TAB_GOAL_PERCENT:g} %",
        f"  one tick of the panel's timer asks RocBoard.node_markdown: {show(result['panel_ms']['live_only'], 'ms', digits=2)} (in-process, {result['gpus']} runs' samplers),"
        f" {show(result['panel_ms']['with_ended'], 'ms', digits=2)} with {ENDED_RUNS} ended runs beside them;"
        " the rest of a tick is Gradio's (one request, not queued; nothing sent while the panel is unchanged)",
        *why_lines(result),
        f"  at the end: {result.get('still_live')} of {result['gpus']} stand-ins alive, {result.get('still_running')} runs running",
        "  the panel as the tab first showed it:",
        *[f"    {row}" for row in (result.get("panel") or "").splitlines() if row.strip()][: GPUS + 2],
        f"Conditions: {conditions_line(result['conditions'])}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(quick=bench_arguments())))
