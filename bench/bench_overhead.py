"""Dashboard overhead: does watching a run in RocBoard slow the run down?

1. The demo run (backend.service.demo_form) trained by `llamafactory-cli train` alone (the
   YAML, command, cwd and environment RocBoard's launcher uses, with nothing watching), and
   the same run started from RocBoard's page with one headless Chromium tab watching it at
   RocBoard's 1 s refresh, in ABBA order (CLI, RocBoard, RocBoard, CLI, ...) so that a drift
   in the machine's load falls on both alike. Wall time is the trainer process's own, from
   its kernel start time to its exit. Goal: RocBoard / CLI <= 1.02.
2. The web process while watching: its CPU over each run (chart rendering included) and
   its peak resident memory; the browser tab's CPU besides.
3. The web process's CPU while one tab watches a training run whose log does not grow (a
   stand-in trainer: each tick asks the watcher's route and finds nothing new), then the
   same with one new loss line a second (the charts and the panel redrawn each second), and
   the same on a run with 20,000 points of history. Goal: under 1 % of one core when the
   log does not grow. The tab's own CPU besides; goal over a demo run: at most 15 %.

`python -m bench.bench_overhead [--quick]`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench import (
    LOSS_CHART_POINTS_JS,
    TRAINER_TIMEOUT_S,
    CpuMeter,
    Workspace,
    bench_arguments,
    conditions,
    conditions_line,
    demo_config,
    fake_run,
    goal_row,
    helpers_settled,
    load_average,
    logged_steps,
    process_started_at,
    ready_for_a_new_run,
    rocboard_server,
    run_cli_trainer,
    show,
    spread,
    start_and_see_first_point,
    train_runtime,
    trainer_log_line,
)
from tests.harness import chromium_browser, kill_tree, run_states, wait_until

OVERHEAD_GOAL = 1.02
OVERHEAD_STEPS = 600
WATCH_CPU_GOAL_PERCENT = 1.0
HISTORY_POINTS = 30
LONG_HISTORY_POINTS = 20_000


# The page's questions to the watcher's route so far (ui/live.js, once a second while the run
# trains), and the Gradio events it sent (run/predict: a panel refresh when the run changed).
TICKS_JS = "() => performance.getEntriesByType('resource').filter(e => e.name.includes('/rocboard/live?')).length"
GRADIO_EVENTS_JS = "() => performance.getEntriesByType('resource').filter(e => e.name.includes('run/predict')).length"
TAB_CPU_GOAL_PERCENT = 15.0


def open_tab(browser: Any, url: str, points: int) -> tuple[Any, Any]:
    context = browser.new_context()
    page = context.new_page()
    page.goto(url)
    page.evaluate("() => performance.setResourceTimingBufferSize(100000)")  # count every tick
    page.wait_for_function(f"() => ({LOSS_CHART_POINTS_JS})() >= {points}", polling=100, timeout=120_000)
    return context, page


def watch_cpu(server_pid: int, seconds: float, trainer_log: Path | None = None, first_step: int = 0, total_steps: int = 0, page: Any = None) -> dict[str, float]:
    """The web process's CPU while one tab watches; with trainer_log, one line a second."""
    ticks_before = page.evaluate(TICKS_JS) if page is not None else 0
    events_before = page.evaluate(GRADIO_EVENTS_JS) if page is not None else 0
    with CpuMeter(server_pid) as meter:
        deadline = time.monotonic() + seconds
        step = first_step
        while time.monotonic() < deadline:
            if trainer_log is not None:
                with open(trainer_log, "a", encoding="utf-8") as log:
                    log.write(trainer_log_line(step, total_steps))
                step += 1
            time.sleep(1.0)
    figures = meter_figures(meter)
    if page is not None:
        figures["ticks"] = page.evaluate(TICKS_JS) - ticks_before
        figures["gradio_events"] = page.evaluate(GRADIO_EVENTS_JS) - events_before
    return figures


def steady_watch(workdir: Path, browser: Any, server: Any, runs_dir: Path, seconds: float, long_history: bool) -> dict[str, Any]:
    figures: dict[str, Any] = {"no_tab": watch_cpu(server.pid, seconds)}
    run_id, trainer_log, stand_in = fake_run(runs_dir, HISTORY_POINTS, active=True)
    figures["snapshot_ms"] = snapshot_cost(runs_dir, run_id)
    try:
        context, page = open_tab(browser, server.url, HISTORY_POINTS)
        time.sleep(2.0)  # past the tab's first renders
        figures["idle"] = watch_cpu(server.pid, seconds, page=page)
        figures["one_line_per_s"] = watch_cpu(server.pid, seconds, trainer_log, HISTORY_POINTS + 1, HISTORY_POINTS * 10, page=page)
        context.close()
    finally:
        kill_tree(stand_in.pid)
    if long_history:
        run_id, trainer_log, stand_in = fake_run(runs_dir, LONG_HISTORY_POINTS, active=True)
        try:
            context, page = open_tab(browser, server.url, 100)
            time.sleep(2.0)
            figures["idle_long"] = watch_cpu(server.pid, seconds, page=page)
            figures["one_line_per_s_long"] = watch_cpu(server.pid, seconds, trainer_log, LONG_HISTORY_POINTS + 1, LONG_HISTORY_POINTS * 2, page=page)
            context.close()
        finally:
            kill_tree(stand_in.pid)
    return figures


def snapshot_cost(runs_dir: Path, run_id: str, repeats: int = 300) -> dict[str, float]:
    """RocBoard's own work in one tick about a run whose files did not change
    (RocBoard.live with the version drawn, in this process): the rest of a tick's cost is
    the route's (uvicorn, the guard, JSON)."""
    from backend.service import RocBoard

    board = RocBoard(runs_dir, export_dir=runs_dir.parent / "snapshot-exports")
    drawn = board.live(run_id, "en", "").version
    durations = []
    for _ in range(repeats):
        started = time.perf_counter()
        board.live(run_id, "en", drawn)
        durations.append((time.perf_counter() - started) * 1000)
        time.sleep(0.002)
    return spread(durations)


def meter_figures(meter: CpuMeter) -> dict[str, float]:
    return {
        "wall_s": meter.wall_s,
        "cpu_s": meter.cpu_s,
        "cpu_percent": meter.cpu_percent,
        "browser_cpu_percent": meter.browser_cpu_percent,
        "browser_cpu_s": meter.browser_cpu_s,
        "peak_rss_mib": meter.peak_rss / 2**20,
    }


def rocboard_run(browser: Any, server: Any, runs_dir: Path, max_steps: int) -> dict[str, Any]:
    """The demo run started from the page (its form opens on the demo), watched to its end.
    The tab's CPU is taken over the whole window and over the watching alone (first point
    visible to the run's end): the start's burst (the form turning read-only, the panel
    opening) is the same for a short run and a long one."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(server.url)
        ready_for_a_new_run(page)
        page.locator("#max-steps input").fill(str(max_steps))
        page.locator("#max-steps input").press("Tab")
        known = {state["id"] for state in run_states(runs_dir)}
        with CpuMeter(server.pid) as meter:
            clicked, run_id, visible = start_and_see_first_point(page, runs_dir, known)

            def ended() -> dict[str, Any] | None:
                for s in run_states(runs_dir):
                    if s["id"] == run_id and s["state"] not in ("starting", "running") and s.get("ended_at"):
                        return s
                return None

            with CpuMeter(server.pid) as watching:
                final = wait_until(ended, TRAINER_TIMEOUT_S, interval=0.2, what=f"run {run_id} to end")
        output_dir = runs_dir / run_id / "output"
        return {
            "run_id": run_id,
            "state": final["state"],
            "exit_code": final.get("exit_code"),
            "wall_s": final["ended_at"] - process_started_at(final["pid_started"]),
            "train_runtime_s": train_runtime(output_dir),
            "steps": logged_steps(output_dir),
            "click_to_first_point_visible_s": visible - clicked,
            "server": meter_figures(meter),
            "watching": meter_figures(watching),
        }
    finally:
        context.close()


def run(quick: bool = False) -> dict[str, Any]:
    rounds = 1 if quick else 3
    watch_seconds = 8.0 if quick else 15.0
    order = ["cli", "rocboard"] if quick else ["cli", "rocboard", "rocboard", "cli", "cli", "rocboard"]
    result: dict[str, Any] = {"name": "overhead", "conditions": conditions(), "order": order, "rounds": rounds}
    cli_runs: list[dict[str, Any]] = []
    board_runs: list[dict[str, Any]] = []
    idle_server_during_cli: list[float] = []
    with Workspace("bench-overhead-") as workdir:
        # Longer than the demo's 100 steps (1.6 s of training): long enough to resolve the
        # trainer's own time and to watch the run for a while.
        demo = demo_config(workdir, max_steps=OVERHEAD_STEPS)
        result["demo_steps"] = demo.max_steps
        server = rocboard_server(workdir / "app")
        runs_dir = server.runs_dir
        server.start()
        try:
            result["helpers_settled_after_s"] = helpers_settled(server.pid)
            with chromium_browser() as browser:
                result["steady_watch"] = steady_watch(workdir, browser, server, runs_dir, watch_seconds, long_history=not quick)
                for index, kind in enumerate(order):
                    load_before = load_average()[0]
                    if kind == "cli":
                        with CpuMeter(server.pid, with_browser=False) as idle_meter:
                            trainer = run_cli_trainer(demo, workdir / f"cli-{index}")
                        idle_server_during_cli.append(idle_meter.cpu_percent)
                        cli_runs.append({**trainer.__dict__, "load_1m_before": load_before})
                    else:
                        board_runs.append({**rocboard_run(browser, server, runs_dir, demo.max_steps), "load_1m_before": load_before})
        finally:
            server.stop()
    result["cli_runs"] = cli_runs
    result["rocboard_runs"] = board_runs
    result["idle_server_cpu_percent_during_cli"] = idle_server_during_cli
    summarize(result)
    return result


def summarize(result: dict[str, Any]) -> None:
    cli, board = result["cli_runs"], result["rocboard_runs"]
    cli_wall = spread([r["wall_s"] for r in cli])
    board_wall = spread([r["wall_s"] for r in board])
    cli_loop = spread([r["train_runtime_s"] for r in cli if r["train_runtime_s"]])
    board_loop = spread([r["train_runtime_s"] for r in board if r["train_runtime_s"]])
    ratio = board_wall["median"] / cli_wall["median"]
    loop_ratio = board_loop["median"] / cli_loop["median"] if cli_loop.get("n") and board_loop.get("n") else None
    server_cpu = spread([r["server"]["cpu_percent"] for r in board])
    browser_cpu = spread([r["server"]["browser_cpu_percent"] for r in board])
    browser_watching = spread([r["watching"]["browser_cpu_percent"] for r in board])
    browser_cpu_s = spread([r["server"]["browser_cpu_s"] for r in board])
    peak_rss = max(r["server"]["peak_rss_mib"] for r in board)
    watch = result["steady_watch"]
    idle = watch["idle"]
    result.update(
        cli_wall=cli_wall,
        rocboard_wall=board_wall,
        cli_train_runtime=cli_loop,
        rocboard_train_runtime=board_loop,
        wall_ratio=ratio,
        train_runtime_ratio=loop_ratio,
        server_cpu_during_runs=server_cpu,
        browser_cpu_during_runs=browser_cpu,
        browser_cpu_watching=browser_watching,
        browser_cpu_s_per_run=browser_cpu_s,
        server_peak_rss_mib=peak_rss,
    )
    all_finished = all(r["exit_code"] == 0 for r in cli) and all(r["state"] == "finished" for r in board)
    # Does watching slow the training? The trainer's own train_runtime answers it: a warm start
    # (forked from the app's helper, imports done) makes RocBoard's wall time shorter by the
    # ~6 s of imports, which says nothing about the watching. The machine's own run-to-run
    # noise, from the CLI runs alone: a ratio closer to 1 than this cannot be told from 1.
    noise = (cli_loop["max"] - cli_loop["min"]) / (2 * cli_loop["median"]) if cli_loop.get("n", 0) > 1 else None
    result["cli_noise"] = noise
    if not all_finished or loop_ratio is None:
        verdict: bool | str = False
    elif noise is not None and noise > OVERHEAD_GOAL - 1 and abs(loop_ratio - 1) <= noise:
        verdict = f"not resolvable here (noise ±{100 * noise:.0f} %)"
    else:
        verdict = loop_ratio <= OVERHEAD_GOAL
    result["verdict"] = verdict
    result["goals"] = [
        goal_row("demo run wall time, `llamafactory-cli train` alone", "-", show(cli_wall, "s", digits=1), None),
        goal_row("demo run wall time, RocBoard watching (1 tab, 1 s refresh)", "-", show(board_wall, "s", digits=1), None),
        goal_row("RocBoard / CLI, wall time (medians; RocBoard's trainer starts warm)", "-", f"{ratio:.3f}" + ("" if all_finished else " (a run did not finish)"), None),
        goal_row("RocBoard / CLI, trainer's own train_runtime (medians): does watching slow it?", "<= 1.02", f"{loop_ratio:.3f}" if loop_ratio else "n/a", verdict),
        goal_row("run-to-run noise of the CLI's train_runtime (half its range)", "-", f"±{100 * noise:.1f} %" if noise is not None else "n/a (one run)", None),
        goal_row("web process CPU with no tab open (Gradio/uvicorn idle)", "-", f"{watch['no_tab']['cpu_percent']:.2f} %", None),
        goal_row("web process CPU while one tab watches a run whose log does not grow", "< 1 % of one core", f"{idle['cpu_percent']:.2f} %", idle["cpu_percent"] < WATCH_CPU_GOAL_PERCENT),
        goal_row("web process CPU, 1 new point/s (chart redrawn each second)", "-", f"{watch['one_line_per_s']['cpu_percent']:.2f} %", None),
        goal_row(
            "Chromium tab CPU while watching a demo run (first point visible to the run's end)",
            f"<= {TAB_CPU_GOAL_PERCENT:g} % of one core",
            show(browser_watching, "%", digits=1),
            browser_watching["median"] <= TAB_CPU_GOAL_PERCENT,
        ),
        goal_row("Chromium tab CPU, click to the run's end (the start's redraw of the form included)", "-", show(browser_cpu, "%", digits=1), None),
        goal_row("Chromium tab CPU-seconds per demo run, click to end", "-", show(browser_cpu_s, "s", digits=2), None),
        goal_row("Chromium tab CPU, 1 new point/s (stand-in run)", "-", f"{watch['one_line_per_s']['browser_cpu_percent']:.1f} %", None),
    ]
    if "one_line_per_s_long" in watch:
        result["goals"].append(
            goal_row(
                f"web process CPU, {LONG_HISTORY_POINTS:,}-point run: log not growing / 1 new point/s",
                "-",
                f"{watch['idle_long']['cpu_percent']:.2f} % / {watch['one_line_per_s_long']['cpu_percent']:.2f} %",
                None,
            )
        )
    result["goals"] += [
        goal_row("web process CPU over a demo run (everything)", "-", show(server_cpu, "%", digits=1), None),
        goal_row("web process peak resident memory", "-", f"{peak_rss:.0f} MiB", None),
    ]


def report(result: dict[str, Any]) -> str:
    watch = result["steady_watch"]

    def run_line(kind: str, r: dict[str, Any]) -> str:
        runtime = f"{r['train_runtime_s']:.1f}" if r.get("train_runtime_s") else "n/a"
        extra = ""
        if kind == "rocboard":
            extra = (
                f", click->first point visible {r['click_to_first_point_visible_s']:.1f} s, web CPU {r['server']['cpu_percent']:.1f} %,"
                f" browser CPU {r['server']['browser_cpu_percent']:.1f} % ({r['server']['browser_cpu_s']:.2f} s), while watching {r['watching']['browser_cpu_percent']:.1f} %"
            )
        else:
            first = r.get("first_loss_after_start_s")
            extra = f", first loss line {first:.1f} s after process start" if first else ""
        status = r.get("state") or f"exit {r.get('exit_code')}"
        return f"    {kind:<8} wall {r['wall_s']:6.1f} s, train_runtime {runtime} s, steps {r.get('steps')}, {status}, load {r['load_1m_before']}{extra}"

    runs = []
    cli_iter, board_iter = iter(result["cli_runs"]), iter(result["rocboard_runs"])
    for kind in result["order"]:
        runs.append(run_line(kind, next(cli_iter) if kind == "cli" else next(board_iter)))

    def watch_line(name: str, label: str) -> str:
        w = watch[name]
        ticks = w.get("ticks")
        per_tick = f", {ticks} ticks ({w.get('gradio_events', 0)} Gradio events), {1000 * w['cpu_s'] / ticks:.1f} ms CPU each" if ticks else ""
        return (
            f"  {label:<58} web {w['cpu_percent']:5.2f} % of one core ({w['cpu_s'] * 1000:.0f} ms CPU over {w['wall_s']:.0f} s{per_tick}),"
            f" tab {w['browser_cpu_percent']:.1f} %, RSS {w['peak_rss_mib']:.0f} MiB"
        )

    lines = [
        f"Dashboard overhead on the demo run ({result['demo_steps']} steps), order {' '.join(result['order'])}:",
        *runs,
        f"  CLI alone:          wall {show(result['cli_wall'], 's', digits=1)}; train_runtime {show(result['cli_train_runtime'], 's', digits=1)}",
        f"  RocBoard watching:  wall {show(result['rocboard_wall'], 's', digits=1)}; train_runtime {show(result['rocboard_train_runtime'], 's', digits=1)}",
        f"  ratio of medians: wall {result['wall_ratio']:.3f} (RocBoard's trainer starts warm: no imports)"
        + (f"; train_runtime {result['train_runtime_ratio']:.3f}" if result["train_runtime_ratio"] else "")
        + (f"; the CLI's train_runtime varies by ±{100 * result['cli_noise']:.1f} %" if result.get("cli_noise") is not None else ""),
        "  -> "
        + (
            ("OK" if result["verdict"] else "NOT") + f" <= {OVERHEAD_GOAL}"
            if isinstance(result["verdict"], bool)
            else f"{result['verdict']}: this machine cannot resolve {100 * (OVERHEAD_GOAL - 1):.0f} %"
        ),
        *(
            [
                f"  why: the tab ({result['browser_cpu_watching']['median']:.1f} % of a core while watching) and the web process"
                f" ({result['server_cpu_during_runs']['median']:.1f} %) run on the same {result['conditions'].get('logical_cores', 2)} cores as"
                " this CPU-bound trainer; a browser on another machine (an SSH tunnel) or a GPU-bound trainer does not pay it"
            ]
            if result["verdict"] is False and result.get("train_runtime_ratio")
            else []
        ),
        f"  web process during the RocBoard runs: CPU {show(result['server_cpu_during_runs'], '%', digits=1)} of one core;"
        f" peak RSS {result['server_peak_rss_mib']:.0f} MiB; the tab (Chromium) {show(result['browser_cpu_during_runs'], '%', digits=1)} from the click,"
        f" {show(result['browser_cpu_watching'], '%', digits=1)} while watching",
        f"  the idle web process during the CLI runs (no tab open): {[round(v, 2) for v in result['idle_server_cpu_percent_during_cli']]} % CPU",
        "Web process while one tab watches a training run (stand-in trainer; helpers settled"
        f" {result['helpers_settled_after_s']:.0f} s after start):",
        watch_line("no_tab", "no tab open (Gradio/uvicorn's own idle cost)"),
        watch_line("idle", f"{HISTORY_POINTS}-point run, log not growing (no chart rendering)"),
        watch_line("one_line_per_s", f"{HISTORY_POINTS}-point run, 1 new line/s (chart redrawn each second)"),
    ]
    if "idle_long" in watch:
        lines += [
            watch_line("idle_long", f"{LONG_HISTORY_POINTS:,}-point run, log not growing"),
            watch_line("one_line_per_s_long", f"{LONG_HISTORY_POINTS:,}-point run, 1 new line/s"),
        ]
    idle = watch["idle"]["cpu_percent"]
    extra_ms = 1000 * (watch["idle"]["cpu_s"] - watch["no_tab"]["cpu_s"] * watch["idle"]["wall_s"] / watch["no_tab"]["wall_s"])
    ticks = watch["idle"].get("ticks") or 0
    if ticks:
        lines.append(
            f"  one tick that finds nothing new adds ~{extra_ms / ticks:.1f} ms CPU to the web process (watching minus no tab, per tick);"
            f" RocBoard's own part of it (RocBoard.live) {show(watch['snapshot_ms'], 'ms', digits=2)}; the rest is the route's"
            " (uvicorn, the guard, a ~60-byte JSON answer): no Gradio event"
        )
    lines.append(
        "  (the tab's CPU lands on the training machine only when the browser runs there, as in this bench;"
        " a browser on a laptop, through an SSH tunnel, takes it elsewhere)"
    )
    lines.append(f"  log not growing: {idle:.2f} % -> {'OK' if idle < WATCH_CPU_GOAL_PERCENT else 'NOT'} under {WATCH_CPU_GOAL_PERCENT:g} % of one core")
    lines.append(f"Conditions: {conditions_line(result['conditions'])}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(quick=bench_arguments())))
