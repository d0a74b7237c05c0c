"""Click to first loss point on the demo: RocBoard against LlamaBoard, and where the time goes.

1. The start path alone: `RocBoard.start(demo_form())` in a fresh interpreter, the first
   call (nothing cached) and a second one with the same form, each launching the real
   trainer (killed at once).
2. Both web UIs driven by the same headless Chromium, same model, data and steps, taking
   turns (RocBoard first in odd rounds, LlamaBoard first in even ones):
   - RocBoard: `python app.py`, its page opens on the demo; click Start; the first point is
     visible when the loss chart of the new run has one.
   - LlamaBoard: `llamafactory-cli webui` in a temporary working dir (its `saves/` goes
     there), driven by its element labels: model name Custom, model path, chat template,
     data dir, dataset, learning rate, epochs, compute type, cutoff length, batch size,
     gradient accumulation, logging and save steps; what has no field of its own goes in
     its "Extra arguments" JSON (max_steps, use_cpu, gradient checkpointing off, attention,
     LoRA shape) so the trainer computes the same run. Its first point is visible when its
     progress label `Running N/M` shows (it comes in the same update as its loss plot).
   For both, the trainer's output directory is watched to stamp its phases (imports,
   tokenizer, dataset, model, first step), and the trainer is killed once the point shows.
   Goals: warm, RocBoard at most half LlamaBoard's time; Start pressed as soon as the page is
   up after the app started, no slower than LlamaBoard warm.

`python -m bench.bench_first_loss [--quick]`.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from bench import (
    PHASE_LABELS,
    TRAINER_TIMEOUT_S,
    WATCH_INTERVAL_S,
    LlamaBoardServer,
    OutputWatcher,
    Workspace,
    bench_arguments,
    conditions,
    conditions_line,
    demo_config,
    goal_row,
    helpers_settled,
    newest_run,
    phase_durations,
    process_started_at,
    ready_for_a_new_run,
    rocboard_server,
    show,
    spread,
    start_and_see_first_point,
    wait_quiet,
)
from tests.harness import PYTHON, ROOT, chromium_browser, kill_tree, process_tree, run_states, wait_until

# The start path in a fresh interpreter: what one click costs before the trainer exists.
START_PATH_SCRIPT = r"""
import json, shutil, tempfile, time
from pathlib import Path
from backend.service import RocBoard, demo_form
from tests.harness import kill_tree, wait_for

def end(board, run):
    kill_tree(run.pid)
    wait_for(lambda: not board.store.read(run.id).active, 10, interval=0.05)

work = Path(tempfile.mkdtemp(prefix="bench-start-path-"))
board = RocBoard(work / "runs", export_dir=work / "exports")
form = demo_form()
timings = {}
started = time.perf_counter()
board.parse(form)
timings["parse_first"] = time.perf_counter() - started
for name in ("start_first", "start_again"):
    started = time.perf_counter()
    result = board.start(form)
    timings[name] = time.perf_counter() - started
    if result.run is None:
        raise SystemExit("start refused: " + "; ".join(f.line() for f in result.findings))
    end(board, result.run)
shutil.rmtree(work, ignore_errors=True)
print(json.dumps(timings))
"""


def start_path(repeats: int) -> dict[str, Any]:
    samples = []
    for _ in range(repeats):
        out = subprocess.run([PYTHON, "-c", START_PATH_SCRIPT], capture_output=True, text=True, timeout=600, cwd=ROOT)
        if out.returncode != 0:
            raise RuntimeError(out.stdout[-1000:] + out.stderr[-2000:])
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {name: spread([s[name] for s in samples]) for name in samples[0]}


# --- RocBoard ------------------------------------------------------------------------


def rocboard_trial(browser: Any, server: Any) -> dict[str, Any]:
    runs_dir = server.runs_dir
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(server.url)
        ready_for_a_new_run(page)
        known = {state["id"] for state in run_states(runs_dir)}

        def output_dir() -> Path | None:
            state = newest_run(runs_dir, known)
            return runs_dir / state["id"] / "output" if state else None

        watcher = OutputWatcher(output_dir).start()
        helpers_at_click = len(process_tree(server.pid)) - 1
        clicked, run_id, visible = start_and_see_first_point(page, runs_dir, known)
        watcher.stop()
        state = next(s for s in run_states(runs_dir) if s["id"] == run_id)
        if state.get("pid"):
            kill_tree(state["pid"])
        wait_until(lambda: all(s["state"] not in ("starting", "running") for s in run_states(runs_dir) if s["id"] == run_id), 30, interval=WATCH_INTERVAL_S, what="the run to end")
        return {**trial_figures(clicked, process_started_at(state.get("pid_started")), watcher, visible), "helpers_at_click": helpers_at_click}
    finally:
        context.close()


def trial_figures(clicked: float, process_start: float | None, watcher: OutputWatcher, visible: float) -> dict[str, Any]:
    return {
        "click_to_visible_s": visible - clicked,
        "click_to_on_disk_s": None if watcher.first_loss_at is None else watcher.first_loss_at - clicked,
        "click_to_process_s": None if process_start is None else process_start - clicked,
        "phases": phase_durations(clicked, process_start, watcher.marks, watcher.first_loss_at, visible),
    }


# --- LlamaBoard -----------------------------------------------------------------------


def labelled(page: Any, role: str, label: str) -> Any:
    """The visible element of `role` whose accessible name starts with `label` (LlamaBoard's
    labels carry their help text after the label; other tabs repeat some labels, hidden)."""
    return page.get_by_role(role, name=re.compile("^" + re.escape(label))).filter(visible=True).first


def choose(page: Any, label: str, option: str, role: str = "listbox") -> None:
    box = labelled(page, role, label)
    box.click()
    box.fill(option)
    page.get_by_role("option", name=option, exact=True).filter(visible=True).first.click()


def llamaboard_extra_args(form: dict[str, Any]) -> dict[str, Any]:
    """What LlamaBoard has no field for, so its trainer computes the same run as RocBoard's
    (RocBoard's values typed by its own parser)."""
    from backend.config import parse_form

    config, _ = parse_form(form)
    return {
        "optim": "adamw_torch",  # LlamaBoard's own default extra argument
        "max_steps": config.training.max_steps,
        "use_cpu": True,
        "disable_gradient_checkpointing": not config.training.gradient_checkpointing,
        "flash_attn": config.precision.flash_attn,
        "lora_rank": config.method.lora_rank,
        "lora_alpha": config.method.lora_alpha,
        "lora_dropout": config.method.lora_dropout,
    }


def fill_llamaboard(page: Any, form: dict[str, Any]) -> str:
    """Fills LlamaBoard's Train tab for the demo run; returns its command preview."""
    labelled(page, "textbox", "Model path").wait_for(timeout=120_000)
    choose(page, "Model name", "Custom")
    page.wait_for_timeout(1000)  # its model-name change chain rewrites model path and template
    labelled(page, "textbox", "Model path").fill(str(form["model_path"]))
    choose(page, "Chat template", str(form["template"]))
    labelled(page, "textbox", "Data dir").fill(str(form["dataset_dir"]))
    choose(page, "Dataset", str(form["dataset"]), role="textbox")
    labelled(page, "textbox", "Learning rate").fill(str(form["learning_rate"]))
    labelled(page, "textbox", "Epochs").fill(str(float(form["num_train_epochs"])))
    choose(page, "Compute type", {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}.get(str(form["precision"]), "fp32"))
    for label, value in (
        ("number input for Cutoff length", form["cutoff_len"]),
        ("number input for Batch size", form["batch_size"]),
        ("number input for Gradient accumulation", form["grad_accum"]),
    ):
        box = labelled(page, "spinbutton", label)
        box.fill(str(int(value)))
        box.press("Enter")
    labelled(page, "button", "Extra configurations").click()
    for label, value in (("number input for Logging steps", form["logging_steps"]), ("number input for Save steps", form["save_steps"])):
        box = labelled(page, "spinbutton", label)
        box.fill(str(int(value)))
        box.press("Enter")
    labelled(page, "textbox", "Extra arguments").fill(json.dumps(llamaboard_extra_args(form)))
    page.wait_for_timeout(300)
    labelled(page, "button", "Preview command").click()
    preview = page.get_by_text("llamafactory-cli train").filter(visible=True).first
    preview.wait_for(timeout=60_000)
    return preview.inner_text()


def llamaboard_trial(browser: Any, server: LlamaBoardServer, form: dict[str, Any]) -> dict[str, Any]:
    saves = server.workdir / "saves"
    context = browser.new_context(viewport={"width": 1600, "height": 1200})
    try:
        page = context.new_page()
        page.goto(server.url)
        command = fill_llamaboard(page, form)
        expected = [f"--model_name_or_path {form['model_path']}", f"--dataset {form['dataset']}", f"--max_steps {int(form['max_steps'])}"]
        missing = [part for part in expected if part not in command]
        if missing:
            raise RuntimeError(f"LlamaBoard's form did not take {missing}; its preview:\n{command}")
        known = {str(p) for p in saves.glob("*/*/*")}

        def output_dir() -> Path | None:
            fresh = [p for p in saves.glob("*/*/*") if p.is_dir() and str(p) not in known]
            return fresh[0] if fresh else None

        trainer_started: dict[str, float] = {}

        def trainer_seen() -> bool:
            trainer = server.trainer()
            if trainer is not None:
                trainer_started["at"] = trainer.create_time()
            return trainer is not None

        watcher = OutputWatcher(output_dir).start()
        clicked = time.time()
        labelled(page, "button", "Start").click()
        wait_until(trainer_seen, 300, interval=WATCH_INTERVAL_S, what="LlamaBoard's trainer process")
        page.get_by_text(re.compile(r"Running \d+/\d+")).filter(visible=True).first.wait_for(timeout=int(TRAINER_TIMEOUT_S * 1000))
        visible = time.time()
        watcher.stop()
        trainer = server.trainer()
        if trainer is not None:
            kill_tree(trainer.pid)
        wait_until(lambda: server.trainer() is None, 30, interval=WATCH_INTERVAL_S, what="LlamaBoard's trainer to end")
        time.sleep(2.5)  # LlamaBoard notices its trainer ended at its next 2 s check
        figures = trial_figures(clicked, process_started_at(trainer_started.get("at")), watcher, visible)
        figures["command"] = command
        return figures
    finally:
        context.close()


# --- the run --------------------------------------------------------------------------


# RocBoard's warm click -> first point against LlamaBoard's (issue 14: the trainer forked warm).
WARM_RATIO_GOAL = 0.5


def run(quick: bool = False) -> dict[str, Any]:
    rounds = 1 if quick else 3
    start_repeats = 1 if quick else 3
    result: dict[str, Any] = {"name": "first_loss", "conditions": conditions()}
    result["start_path"] = start_path(start_repeats)
    trials: dict[str, list[dict[str, Any]]] = {"rocboard": [], "llamaboard": []}
    with Workspace("bench-first-loss-") as workdir:
        demo = demo_config(workdir)
        result["demo_form"] = demo.form
        rocboard = rocboard_server(workdir / "rocboard")
        llamaboard = LlamaBoardServer(workdir / "llamaboard")
        try:
            with chromium_browser() as browser:
                rocboard.start()
                result["rocboard_serving_s"] = rocboard.serving_after_s
                # A user who presses Start as soon as the page is up, while the server's
                # start-up helpers (the doctor's probe, the demo's argument check) still run.
                result["cold_trial"] = rocboard_trial(browser, rocboard)
                result["rocboard_helpers_settled_s"] = helpers_settled(rocboard.pid)
                llamaboard.start()
                result["llamaboard_serving_s"] = llamaboard.serving_after_s
                result["llamaboard_quiet_after_s"] = wait_quiet([llamaboard.pid])
                for index in range(rounds):
                    order = ["rocboard", "llamaboard"] if index % 2 == 0 else ["llamaboard", "rocboard"]
                    for kind in order:
                        wait_quiet([rocboard.pid, llamaboard.pid])
                        if kind == "rocboard":
                            trials[kind].append(rocboard_trial(browser, rocboard))
                        else:
                            trials[kind].append(llamaboard_trial(browser, llamaboard, demo.form))
        finally:
            rocboard.stop()
            llamaboard.stop()
    result["trials"] = trials
    summarize(result)
    return result


def summarize(result: dict[str, Any]) -> None:
    summary: dict[str, Any] = {}
    for kind, trials in result["trials"].items():
        summary[kind] = {
            "visible": spread([t["click_to_visible_s"] for t in trials]),
            "on_disk": spread([t["click_to_on_disk_s"] for t in trials if t["click_to_on_disk_s"] is not None]),
            "process": spread([t["click_to_process_s"] for t in trials if t["click_to_process_s"] is not None]),
            "phases": {name: spread([t["phases"][name] for t in trials if t["phases"].get(name) is not None]) for name in PHASE_LABELS},
        }
    result["summary"] = summary
    board, llama = summary["rocboard"]["visible"]["median"], summary["llamaboard"]["visible"]["median"]
    result["ratio"] = board / llama
    # Turns taken next to each other, paired: their differences cancel slow drifts of the load.
    pairs = list(zip(result["trials"]["rocboard"], result["trials"]["llamaboard"], strict=True))
    result["paired_differences"] = [ours["click_to_visible_s"] - theirs["click_to_visible_s"] for ours, theirs in pairs]
    # The machine's run-to-run noise, from each side's own spread (half the range).
    noises = [(s["visible"]["max"] - s["visible"]["min"]) / (2 * s["visible"]["median"]) for s in summary.values() if s["visible"].get("n", 0) > 1]
    result["noise"] = max(noises) if noises else None
    # What each UI adds around the same trainer: its start path and its display path.
    for kind in summary:
        phases = summary[kind]["phases"]
        own = [phases[name]["median"] for name in ("process_start", "first_loss_visible") if phases[name].get("n")]
        summary[kind]["ui_own_s"] = sum(own) if len(own) == 2 else None
    if result["ratio"] <= WARM_RATIO_GOAL:
        verdict: bool | str = True
    elif result["noise"] is not None and result["ratio"] - WARM_RATIO_GOAL <= result["noise"] * WARM_RATIO_GOAL:
        verdict = f"within noise (±{100 * result['noise']:.0f} %)"
    else:
        verdict = False
    result["verdict"] = verdict
    path = result["start_path"]
    result["notes"] = phase_notes(summary, result)
    result["goals"] = [
        goal_row("click -> first loss point visible, RocBoard", "-", show(summary["rocboard"]["visible"], "s", digits=1), None),
        goal_row("click -> first loss point visible, LlamaBoard", "-", show(summary["llamaboard"]["visible"], "s", digits=1), None),
        goal_row("RocBoard / LlamaBoard (medians), both warm", f"<= {WARM_RATIO_GOAL}", f"{result['ratio']:.2f}; paired differences {[round(d, 1) for d in result['paired_differences']]} s", verdict),
        goal_row("what the UI itself adds (click -> trainer start, + first line on disk -> visible), RocBoard / LlamaBoard", "-",
                 f"{fmt_seconds(summary['rocboard']['ui_own_s'])} / {fmt_seconds(summary['llamaboard']['ui_own_s'])}", None),
        goal_row(
            "click -> first loss point visible, RocBoard, Start pressed as soon as the page is up after app start",
            "<= LlamaBoard's median",
            f"{result['cold_trial']['click_to_visible_s']:.1f} s (n=1)",
            result["cold_trial"]["click_to_visible_s"] <= llama,
        ),
        goal_row("click -> first loss line on disk, RocBoard / LlamaBoard", "-",
                 f"{summary['rocboard']['on_disk'].get('median', float('nan')):.1f} s / {summary['llamaboard']['on_disk'].get('median', float('nan')):.1f} s", None),
        goal_row("start path: RocBoard.start(demo form), first call in a fresh process", "-", show(path["start_first"], "s"), None),
        goal_row("start path: RocBoard.start(demo form), again (cached checks)", "-", show(path["start_again"], "s", digits=3), None),
        goal_row("app start to serving, RocBoard / LlamaBoard (one start each)", "-", f"{result['rocboard_serving_s']:.1f} s / {result['llamaboard_serving_s']:.1f} s", None),
    ]


def fmt_seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def phase_notes(summary: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """Where the two differ most, said in words (medians of the phases)."""
    differences = []
    for name, label in PHASE_LABELS.items():
        board, llama = summary["rocboard"]["phases"].get(name, {}), summary["llamaboard"]["phases"].get(name, {})
        if board.get("n") and llama.get("n"):
            differences.append((board["median"] - llama["median"], name, label, board["median"], llama["median"]))
    notes = []
    if differences:
        gap, name, label, board, llama = max(differences, key=lambda d: abs(d[0]))
        faster = "RocBoard" if gap < 0 else "LlamaBoard"
        notes.append(f"largest difference: '{label.lstrip('-> ')}' {board:.1f} s in RocBoard vs {llama:.1f} s in LlamaBoard ({faster} faster by {abs(gap):.1f} s)")
    cold = result.get("cold_trial", {})
    path = result["start_path"]
    cold_cost = path["start_first"]["median"] - path["start_again"]["median"]
    if cold.get("click_to_process_s") is not None and cold["click_to_process_s"] > 2 and cold_cost > 2:
        notes.append(
            f"first click right after app start: the trainer started {cold['click_to_process_s']:.1f} s after the click,"
            f" with {cold.get('helpers_at_click', 0)} start-up helper process(es) of the server still running: the check"
            " and the warm start wait for the app's LLaMA-Factory helper to finish importing torch (it starts with the app);"
            f" without that helper (this start path, a fresh interpreter) a first call costs {path['start_first']['median']:.1f} s"
            f" (a one-shot check importing torch) and {path['start_again']['median'] * 1000:.0f} ms once the same form was checked"
        )
    return notes


def report(result: dict[str, Any]) -> str:
    summary, path = result["summary"], result["start_path"]
    lines = [
        "Start path: RocBoard.start(demo form) in a fresh interpreter (launches the real trainer):",
        f"  parse + checks, first call:  {show(path['parse_first'], 's', digits=3)}",
        f"  start, first call:           {show(path['start_first'], 's')}",
        f"  start, same form again:      {show(path['start_again'], 's', digits=3)}",
        "Click -> first loss point, headless Chromium, same model, data and steps:",
    ]
    for kind, name in (("rocboard", "RocBoard"), ("llamaboard", "LlamaBoard")):
        s = summary[kind]
        each = [round(t["click_to_visible_s"], 1) for t in result["trials"][kind]]
        lines.append(f"  {name:<10} visible {show(s['visible'], 's', digits=1)} {each}; on disk {show(s['on_disk'], 's', digits=1)}")
    verdict = result["verdict"]
    lines.append(
        f"  RocBoard / LlamaBoard: {result['ratio']:.2f} (paired differences, RocBoard minus LlamaBoard:"
        f" {[round(d, 1) for d in result['paired_differences']]} s) -> "
        + (("OK" if verdict else "NOT") + " no slower" if isinstance(verdict, bool) else f"{verdict}: neither is measurably slower")
    )
    lines.append(
        f"  what the UI itself adds around the same trainer (click -> trainer start, + first line on disk -> visible):"
        f" RocBoard {fmt_seconds(summary['rocboard']['ui_own_s'])}, LlamaBoard {fmt_seconds(summary['llamaboard']['ui_own_s'])}"
    )
    cold = result["cold_trial"]
    cold_process = cold.get("click_to_process_s")
    lines.append(
        f"  RocBoard, Start pressed as soon as the page was up after the app started: visible {cold['click_to_visible_s']:.1f} s"
        + (f", trainer started {cold_process:.1f} s after the click" if cold_process is not None else "")
        + " (n=1)"
    )
    lines.append("  where the time goes (medians; RocBoard | LlamaBoard):")
    for name, label in PHASE_LABELS.items():
        board = summary["rocboard"]["phases"].get(name, {})
        llama = summary["llamaboard"]["phases"].get(name, {})

        def cell(s: dict[str, float]) -> str:
            return f"{s['median']:6.1f} s" if s.get("n") else "   n/a  "

        lines.append(f"    {cell(board)} | {cell(llama)}  {label}")
    lines += [*["  " + note for note in result.get("notes", [])]]
    lines += [
        "  (phase moments are when a line appeared in the trainer's running_log.txt, looked at every 50 ms;"
        " 'process start' is the kernel's start time of the trainer process)",
        f"  app start to serving: RocBoard {result['rocboard_serving_s']:.1f} s, LlamaBoard {result['llamaboard_serving_s']:.1f} s"
        f" (RocBoard's start-up helpers settled {result['rocboard_helpers_settled_s']:.0f} s after its first trial;"
        f" LlamaBoard went quiet {result['llamaboard_quiet_after_s']:.0f} s after it answered)",
        "  LlamaBoard's trainer command (its preview):",
        *["    " + line for line in result["trials"]["llamaboard"][0]["command"].splitlines()],
        f"Conditions: {conditions_line(result['conditions'])}",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(quick=bench_arguments())))
