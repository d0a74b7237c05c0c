"""Fault drills on real processes: the app is killed, the trainer is killed, Start is
pressed twice, a run directory is deleted by hand. Each drill checks the run's files and
the process table (psutil), and that no process is left behind.

The page drill runs `python app.py` as a subprocess and drives it with headless Chromium;
the others use the backend facade the page calls.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from backend.runs import LOG_FILE, OUTPUT_DIR, RunNotFound
from backend.runs.logs import TRAINER_LOG, parse_metric
from backend.runs.resume import ATTEMPTS_DIR, checkpoint_info, latest_checkpoint
from tests.harness import (
    AppServer,
    chromium_available,
    chromium_browser,
    kill_processes,
    process_tree,
    run_states,
    trainer_process,
    wait_until,
)

TOTAL = 40  # max_steps the drill sets on the page, with a checkpoint every SAVE_STEPS
SAVE_STEPS = 5



def started_by(trainer: psutil.Process, app_pid: int) -> bool:
    """The trainer is the app's child (a cold start), or a child of the app's LLaMA-Factory
    helper (a warm start: forked by the helper, itself the app's child)."""
    parent = trainer.parent()
    return parent is not None and (parent.pid == app_pid or parent.ppid() == app_pid)

def run_processes(root: Path) -> list[psutil.Process]:
    """Every live process working under `root` (trainers run in their run directory)."""
    found = []
    for process in psutil.process_iter(["cwd", "status"]):
        try:
            cwd = process.info["cwd"]
            if cwd and process.info["status"] != psutil.STATUS_ZOMBIE and Path(cwd).is_relative_to(root):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            continue
    return found


def log_lines(run_dir: Path) -> list[dict]:
    path = run_dir / OUTPUT_DIR / TRAINER_LOG
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def expected_losses(run_dir: Path) -> list[tuple[int, float]]:
    """(step, loss) of the curve the log holds: for every step, its last line with a loss
    (a resumed attempt's line supersedes the one it retrained)."""
    last: dict[int, float] = {}
    for record in log_lines(run_dir):
        point = parse_metric(record)
        if point is not None and point.loss is not None:
            last[point.step] = point.loss
    return sorted(last.items())


def page_text(page, selector: str) -> str:
    return page.locator(selector).inner_text()


def chart_steps(page) -> list[int]:
    """The x values of the loss chart's first trace, as plotly.js holds them in the page."""
    return page.evaluate(
        """() => { const plot = document.querySelector('#loss-chart .js-plotly-plot');
                   return plot && plot.data && plot.data.length ? Array.from(plot.data[0].x) : []; }"""
    )


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def signal_pending(process: psutil.Process, signum: int) -> bool:
    """Whether `signum` waits to be delivered to `process` (a stopped process keeps it pending:
    proc(5), the process-wide ShdPnd and the thread's SigPnd masks)."""
    try:
        with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
            masks = [int(line.split()[1], 16) for line in status if line.startswith(("ShdPnd:", "SigPnd:"))]
    except (OSError, ValueError, IndexError):
        return False
    return any(mask & (1 << (signum - 1)) for mask in masks)


def read_state(run_dir: Path) -> dict:
    return json.loads((run_dir / "state.json").read_text())


def ended(run_dir: Path) -> dict | None:
    state = read_state(run_dir)
    return state if state["state"] not in ("starting", "running") else None


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(1200)
def test_page_drill_kill_trainer_kill_app_stop_at_checkpoint_resume(demo_assets, tmp_path):
    """On the page: double-click Start (one run); kill -9 the trainer (failed); Resume
    (continues from its checkpoint); kill -9 the app mid-run (the trainer trains on); restart
    the app (re-attached: new tabs show the run with its whole curve); Stop as a checkpoint
    is being written (graceful: the checkpoint completes, the adapter is saved); Resume
    again; the run ends: steps 1..40 once each, equal to the log's lines; Resume is not offered on
    the finished run (and refused behind the page); no process is left."""
    if not chromium_available():
        pytest.skip("needs Playwright and /usr/bin/chromium")
    workdir = tmp_path / "app"
    runs_dir = workdir / "runs"
    server_a = AppServer(workdir=workdir)
    server_b = AppServer(workdir=workdir)
    figures: dict[str, object] = {}
    try:
        with chromium_browser() as browser:
            server_a.start()
            tab = browser.new_page()
            tab.goto(server_a.url)
            tab.locator("#start").wait_for(timeout=60_000)
            for field, value in (("#max-steps", TOTAL), ("#save-steps", SAVE_STEPS)):
                tab.locator(f"{field} input").fill(str(value))
                tab.locator(f"{field} input").press("Tab")
            tab.locator("#start").dblclick()  # a double-click launches exactly one run
            wait_until(lambda: run_states(runs_dir), 120, what="the run to start")
            run_id = run_states(runs_dir)[0]["id"]
            run_dir = runs_dir / run_id
            assert yaml.safe_load((run_dir / "config.yaml").read_text())["max_steps"] == TOTAL

            # --- kill -9 the trainer: the page says failed; a complete checkpoint is left ------
            wait_until(lambda: latest_checkpoint(run_dir) is not None and len(log_lines(run_dir)) >= 12, 300, 0.05, what="a checkpoint and step 12")
            trainer = trainer_process(read_state(run_dir))
            assert trainer is not None and started_by(trainer, server_a.process.pid)
            tree = process_tree(trainer)
            trainer.kill()
            _, alive = psutil.wait_procs(tree, timeout=10)
            assert not alive, alive
            figures["trainer killed at step"] = log_lines(run_dir)[-1]["current_steps"]
            wait_until(lambda: "failed" in page_text(tab, "#status"), 60, what="the page to say failed")
            assert read_state(run_dir)["state"] == "failed"
            assert len(run_states(runs_dir)) == 1  # the double-click made one run
            checkpoint = latest_checkpoint(run_dir)
            assert checkpoint is not None and checkpoint_info(checkpoint) is not None
            figures["resumed from"] = checkpoint.name

            # --- Resume on the page ------------------------------------------------------------
            lines_before_resume = len(log_lines(run_dir))
            tab.locator("#resume").click()
            wait_until(lambda: read_state(run_dir)["attempts"] == 2 and read_state(run_dir)["state"] == "running", 60, what="the resume to start")
            assert read_state(run_dir)["resumed_from"] == f"output/{checkpoint.name}"

            # --- kill -9 the app mid-run: the trainer trains on --------------------------------
            wait_until(lambda: len(log_lines(run_dir)) >= lines_before_resume + 3, 300, 0.05, what="the resumed run to log")
            state = read_state(run_dir)
            trainer = trainer_process(state)
            assert trainer is not None and started_by(trainer, server_a.process.pid)
            os.kill(server_a.process.pid, signal.SIGKILL)
            server_a.process.wait(timeout=10)
            tab.close()
            lines_at_kill = len(log_lines(run_dir))
            wait_until(lambda: len(log_lines(run_dir)) >= lines_at_kill + 2, 120, 0.05, what="the trainer to log on without the app")
            assert trainer_process(state) is not None  # the same pid *and* start time
            # Hold the trainer (SIGSTOP: paused, not killed) while the app restarts and the new
            # tabs load, so that they meet it mid-run however fast it trains or slowly the app
            # starts on two shared cores; it continues where it was on SIGCONT.
            trainer.send_signal(signal.SIGSTOP)
            try:
                lines_while_down = len(log_lines(run_dir))
                figures["lines logged without the app"] = lines_while_down - lines_at_kill
                server_b.start()
                assert f"Re-attached to run {run_id} (running)" in server_b.output()
                for _ in range(2):  # a reload, and a second tab
                    tab = browser.new_page()
                    tab.goto(server_b.url)
                    wait_until(lambda tab=tab: run_id in page_text(tab, "#status") and "running" in page_text(tab, "#status"), 60, what="the tab to show the live run")
                    steps = wait_until(lambda tab=tab: chart_steps(tab), 60, what="the loss chart")
                    # The whole curve, from step 1, no gap, no duplicate, every line so far.
                    assert steps == list(range(1, max(steps) + 1))
                    assert max(steps) == max(p for p, _ in expected_losses(run_dir))
            finally:
                trainer.send_signal(signal.SIGCONT)

            # --- Stop on the page as a checkpoint is written (a run this app did not start) ------
            output = run_dir / OUTPUT_DIR
            known = {path.name for path in output.glob("checkpoint-*")}
            writing = wait_until(lambda: next((p for p in output.glob("checkpoint-*") if p.name not in known), None), 120, 0.02, what="the next checkpoint")
            tree = process_tree(trainer)
            # Held there (SIGSTOP) until the app's stop signal is pending, then let go: on two
            # shared cores the demo trains its last 20 steps in ~2 s, faster than a click can
            # reach the app, and a run that reached its last step has nothing to resume (a CI run
            # stopped at step 40, after the end). The signal waits while it is held, so the stop
            # still lands as this checkpoint is being written.
            for process in tree:
                process.send_signal(signal.SIGSTOP)
            began = time.monotonic()
            try:
                tab.locator("#stop").click()
                wait_until(lambda: signal_pending(trainer, signal.SIGABRT), 30, 0.02, what="the app's stop signal to reach the held trainer")
            finally:
                for process in tree:
                    try:
                        process.send_signal(signal.SIGCONT)
                    except psutil.NoSuchProcess:
                        pass
            wait_until(lambda: not any(_alive(p) for p in tree), 15, 0.05, what="the trainer's tree to end")
            figures["stop took s"] = round(time.monotonic() - began, 1)
            assert figures["stop took s"] < 10
            wait_until(lambda: "stopped" in page_text(tab, "#status"), 60, what="the page to say stopped")
            assert read_state(run_dir)["state"] == "stopped"
            # The stop was graceful: the trainer finished the checkpoint it was writing and
            # saved its adapter and state where it stopped.
            # (On a loaded machine the trainer may reach the next save before the stop lands.)
            latest = latest_checkpoint(run_dir)
            assert checkpoint_info(writing) is not None and latest is not None
            assert checkpoint_info(latest) is not None and checkpoint_info(latest).step >= checkpoint_info(writing).step
            saved_step = json.loads((output / "trainer_state.json").read_text())["global_step"]
            assert saved_step >= checkpoint_info(writing).step
            assert (output / "adapter_model.safetensors").stat().st_mtime >= (writing / "trainer_state.json").stat().st_mtime
            figures["stopped at step"] = saved_step
            figures["checkpoint being written"] = writing.name

            # --- Resume again: the run ends -----------------------------------------------------
            tab.locator("#resume").click()
            # prepare_resume counts the attempt before the launch records it (a warm start may wait
            # for the app's LLaMA-Factory helper to finish importing): wait for the launch.
            wait_until(lambda: (s := read_state(run_dir))["attempts"] == 3 and s["state"] != "stopped", 120, what="the second resume to start")
            final = wait_until(lambda: ended(run_dir), 600, 0.5, what="the resumed run to end")
            assert (final["state"], final["exit_code"]) == ("finished", 0), (run_dir / LOG_FILE).read_text()[-3000:]
            assert final["resumed_from"] == f"output/{latest.name}"  # the newest complete checkpoint
            wait_until(lambda: "finished" in page_text(tab, "#status"), 60, what="the page to say finished")
            assert run_processes(runs_dir) == []

            # 0 points lost: a fresh reader (as after another restart) sees steps 1..40 once
            # each, each equal to that step's last line in trainer_log.jsonl.
            from backend.service import RocBoard

            viewer = RocBoard(runs_dir, export_dir=tmp_path / "viewer-exports")
            points = viewer.snapshot(run_id).points
            assert [p.step for p in points] == list(range(1, TOTAL + 1))
            # (The last step is left out until MetricSeries keeps its loss: see test_resume.)
            assert [(p.step, p.loss) for p in points[: TOTAL - 1]] == expected_losses(run_dir)[: TOTAL - 1]
            assert chart_steps(tab)[: TOTAL - 1] == list(range(1, TOTAL))
            # Nothing lost on disk: each attempt's log is the start of the next one's.
            first = (run_dir / ATTEMPTS_DIR / "1" / OUTPUT_DIR / TRAINER_LOG).read_bytes()
            second = (run_dir / ATTEMPTS_DIR / "2" / OUTPUT_DIR / TRAINER_LOG).read_bytes()
            assert second.startswith(first) and (output / TRAINER_LOG).read_bytes().startswith(second)
            figures["log lines"] = len(log_lines(run_dir))

            # --- Resume on a finished run: not offered on the page; refused behind it --------
            assert tab.locator("#resume").is_disabled()
            refused = viewer.resume(run_id)
            assert not refused.started and "finished all its steps" in refused.findings[0].problem
            after = read_state(run_dir)
            assert (after["state"], after["attempts"]) == ("finished", 3)
            assert run_processes(runs_dir) == []
        print(f"\ndrill: {figures}")
    except BaseException:
        print("\n--- app output (restarted) ---\n" + server_b.output()[-4000:])
        print("--- state ---\n" + json.dumps(run_states(runs_dir), indent=1)[-2000:])
        raise
    finally:
        for server in (server_a, server_b):
            server.stop()  # and, by pid and start time, any trainer still alive
    assert run_processes(runs_dir) == []
    for server in (server_a, server_b):
        assert server.process is None or server.process.poll() is not None


@pytest.fixture
def board(tmp_path, demo_assets):
    from backend.service import RocBoard

    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    yield board
    # Whatever a drill left behind, found by working directory (a deleted run's trainer has
    # no state file any more) and killed by pid; the drills assert on leftovers themselves.
    kill_processes(member for process in run_processes(board.store.root) for member in process_tree(process))


@pytest.mark.slow
def test_two_starts_at_once_launch_exactly_one_trainer(board):
    """Two Starts at once (two tabs): one trainer; the other run waits in the queue, and a
    cancelled queued run never starts."""
    from backend.service import demo_form

    barrier = threading.Barrier(2)
    results = []

    def press_start(name: str) -> None:
        barrier.wait()
        results.append(board.start(dict(demo_form(), run_name=name, max_steps=5000), intent=name))

    threads = [threading.Thread(target=press_start, args=(name,)) for name in ("first", "second")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    training = [r for r in results if r.started and not r.queued]
    queued = [r for r in results if r.queued]
    assert len(training) == 1 and len(queued) == 1
    assert board.cancel_queued(queued[0].run.id) == []
    assert len(run_processes(board.store.root)) >= 1
    began = time.monotonic()
    assert board.stop(training[0].run.id).state == "stopped"
    assert time.monotonic() - began < 10
    assert run_processes(board.store.root) == []
    assert board.store.read(queued[0].run.id).pid is None  # it never started


@pytest.mark.slow
def test_run_directory_deleted_while_it_trains(board):
    from backend.service import demo_form

    result = board.start(dict(demo_form(), run_name="doomed", max_steps=5000, save_steps=5000))
    assert result.started
    run_id = result.run.id
    run_dir = board.store.run_dir(run_id)
    # Mid-training (it has read its config and logs steps), not still starting up.
    wait_until(lambda: board.snapshot(run_id).points, 300, what="the first logged step")
    assert board.snapshot(run_id).run.active
    trainer = trainer_process(board.store.read(run_id).to_json())
    assert trainer is not None
    shutil.rmtree(run_dir)

    # The page's timer keeps asking: a clear "not found", never a crash.
    with pytest.raises(RunNotFound):
        board.snapshot(run_id)
    assert board.runs() == [] and board.active_run() is None
    # Nobody can see or stop that trainer any more, so the app stops it: the one-run-at-a-
    # time rule is not silently broken by an invisible run holding the GPUs.
    gone = wait_until(lambda: run_processes(board.store.root) == [] and trainer_process(result.run.to_json()) is None, 12, what="the orphaned trainer to be stopped")
    assert gone
    second = board.start(dict(demo_form(), run_name="after"))
    assert second.started
    board.stop(second.run.id)
