"""GPU health alerts under a real run: the app's sampler reads a simulated three-GPU AMD sysfs
tree (backend/telemetry/fake_sysfs.py, its VRAM and busy % changed as the test goes) while a
real `llamafactory-cli` trains the demo model; RunDecisions (no tab open) decides. Imbalance,
a lost rank and a stall (the trainer really hung: SIGSTOP) each fire once, naming the right
GPU, and nothing fires while the GPUs are balanced. The alerts are in the run's folder: a
fresh board (a restarted app) shows them on the panel, in the runs table and in `status`.

A stand-in process (no log line ever) shows the stop-on-stall setting stopping a run."""

from __future__ import annotations

import signal
import sys

import psutil
import pytest

from backend.health import EpisodeEnd, HealthSettings
from backend.health.record import read_alerts, read_events
from backend.runs_cli import _status_line, run_status
from backend.service import RocBoard, demo_form
from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards, set_load
from backend.telemetry.sampler import Sampler
from tests.harness import wait_for
from tests.tiers import starts

pytestmark = pytest.mark.timeout(600)

GIB = 2**30
INTERVAL_S = 0.25
SETTINGS = HealthSettings(lost_rank_s=1.5, stall_s=2.0, imbalance_s=1.5)
BALANCED = {0: (20 * GIB, 92), 1: (20 * GIB, 88), 2: (20 * GIB, 95)}


def alerts(board, run_id):
    return [alert for alert, _ in read_alerts(board.store.run_dir(run_id))]


def seen_past(board, run_id, moment):
    """Waits until the backend has decided on readings taken after `moment`."""
    assert wait_for(lambda: (board.decisions.health_seen(run_id) or 0) > moment, timeout=30, interval=0.1), "the health watch saw no new reading"


def wait_alert(board, run_id, kind):
    found = wait_for(lambda: next((a for a in alerts(board, run_id) if a.kind == kind), None), timeout=30, interval=0.1)
    assert found is not None, f"no {kind} alert: {alerts(board, run_id)}"
    return found


def wait_end(board, run_id, kind):
    def ended():
        return any(isinstance(e, EpisodeEnd) and e.kind == kind for e in read_events(board.store.run_dir(run_id)))

    assert wait_for(ended, timeout=30, interval=0.1), f"the {kind} episode did not end"


@pytest.fixture
def gpus(tmp_path):
    root = build_fake_sysfs(tmp_path / "sys", server_cards(3), bmc_vga=False)
    set_load(root, BALANCED)
    return root


@starts("lf_helper", "trainer")
def test_imbalance_lost_rank_and_stall_each_fire_once_under_a_demo_trainer(tmp_path, demo_assets, gpus):
    sampler = Sampler(interval_s=INTERVAL_S, sysfs_root=gpus)
    sampler.start()
    board = RocBoard(tmp_path / "runs", sampler=sampler, export_dir=tmp_path / "exports", health=SETTINGS)
    result = board.start(dict(demo_form(), max_steps=5000, save_steps=5000, run_name="health"))
    assert result.started, [f.line() for f in result.findings]
    run_id = result.run.id
    trainer = None
    try:
        assert wait_for(lambda: board.snapshot(run_id).points, timeout=300, interval=0.5), "no loss point arrived"
        # Balanced, training, logging: nothing, for longer than any threshold.
        start = board.decisions.health_seen(run_id) or 0
        seen_past(board, run_id, start + 3 * SETTINGS.stall_s)
        assert alerts(board, run_id) == []

        # One card full, the others nearly empty (still busy): an imbalance naming GPU 0.
        set_load(gpus, {0: (50 * GIB, None), 1: (GIB // 4, None), 2: (GIB // 4, None)})
        imbalance = wait_alert(board, run_id, "imbalance")
        assert (imbalance.gpu, imbalance.params["light"]) == (0, [["", 1], ["", 2]])
        seen_past(board, run_id, imbalance.at + 2 * SETTINGS.imbalance_s)
        set_load(gpus, BALANCED)
        wait_end(board, run_id, "imbalance")

        # GPU 2 stops working while 0 and 1 go on: a lost rank naming GPU 2.
        set_load(gpus, {2: (None, 0)})
        lost = wait_alert(board, run_id, "lost_rank")
        assert lost.gpu == 2 and lost.params["others_pct"] >= 88
        seen_past(board, run_id, lost.at + 2 * SETTINGS.lost_rank_s)
        set_load(gpus, {2: (None, 95)})
        wait_end(board, run_id, "lost_rank")

        # The trainer hangs for real (every process of it stopped): no log line, every GPU idle.
        trainer = psutil.Process(board.store.read(run_id).pid)
        hung = [trainer, *trainer.children(recursive=True)]
        for process in hung:
            process.send_signal(signal.SIGSTOP)
        set_load(gpus, {0: (None, 0), 1: (None, 0), 2: (None, 0)})
        stall = wait_alert(board, run_id, "stall")
        assert stall.gpu is None and stall.params["gpus"] == 3
        seen_past(board, run_id, stall.at + 2 * SETTINGS.stall_s)

        # Each exactly once, the right GPU named; the run itself left alone (stop-on-stall is off).
        assert [(a.kind, a.gpu) for a in alerts(board, run_id)] == [("imbalance", 0), ("lost_rank", 2), ("stall", None)]
        assert board.store.read(run_id).state == "running"
        for process in hung:
            process.send_signal(signal.SIGCONT)

        # What a restarted app shows, read from the run's folder.
        again = RocBoard(tmp_path / "runs")
        for locale, words in (("en", ("GPU health", "GPU 0 holds 50.0", "GPU 2 has been idle", "NCCL_DEBUG=INFO")), ("zh-CN", ("GPU 健康", "GPU 2 已空闲", "通信挂起"))):
            panel = again.run_view(run_id, locale).alert.replace("\\", "")  # Markdown's escapes aside
            assert all(word in panel for word in words), panel
            _, shown, _ = again.history_table(locale)
            assert any(row[0] == run_id and row[2].endswith("⚠3") for row in shown), shown
            line = _status_line(run_status(again, run_id, locale), locale)
            assert "⚠ 3" in line, line
    finally:
        if trainer is not None:
            for process in [trainer, *trainer.children(recursive=True)]:
                try:
                    process.send_signal(signal.SIGCONT)
                except psutil.Error:
                    pass
        board.stop(run_id)
        sampler.stop()


def hang_after_training(board, gpus, run_id):
    """The stand-in's GPUs train a moment (as seen by the backend), then all go idle: with no
    log line ever, a stall."""
    seen_past(board, run_id, 0)
    seen_past(board, run_id, board.decisions.health_seen(run_id) or 0)
    set_load(gpus, {0: (None, 0), 1: (None, 0), 2: (None, 0)})


def test_stop_on_stall_stops_a_hung_run_saying_why(tmp_path, gpus):
    sampler = Sampler(interval_s=INTERVAL_S, sysfs_root=gpus)
    sampler.start()
    board = RocBoard(tmp_path / "runs", sampler=sampler, export_dir=tmp_path / "exports", health=HealthSettings(stall_s=1.0, stop_on_stall=True))
    state = board.store.create("hung", "mi250", "m", {"config.yaml": "", "train.log": ""})
    # A stand-in trainer that never writes a line, launched as the run manager launches one.
    board.run_manager.launch(state.id, {}, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hang_after_training(board, gpus, state.id)

        def ended():
            # The trainer's end is recorded first ("stopped by the user"), the stall's reason
            # over it a moment later (as a stop on NaN does).
            now = board.store.read(state.id)
            return None if now.active or now.stop_reason != "reason.stopped_on_stall" else now

        stopped = wait_for(ended, timeout=30, interval=0.2)
        assert stopped is not None, "the stalled run was not stopped"
        assert stopped.state == "stopped" and stopped.stop_reason == "reason.stopped_on_stall"
        assert [a.kind for a, _ in read_alerts(board.store.run_dir(state.id))] == ["stall"]
        from backend.view import stop_reason_text

        assert "communication hang" in stop_reason_text(stopped, "en") and "通信挂起" in stop_reason_text(stopped, "zh-CN")
        assert stopped.pid is not None and not psutil.pid_exists(stopped.pid), "the stand-in is still there"
    finally:
        if board.store.read(state.id).active:
            board.stop(state.id)
        sampler.stop()


def test_a_restarted_app_does_not_say_it_again(tmp_path, gpus):
    """A second app on the same runs folder reads the run's samples from the start: the stall
    the first recorded is the same episode, no second line."""
    sampler = Sampler(interval_s=INTERVAL_S, sysfs_root=gpus)
    sampler.start()
    settings = HealthSettings(stall_s=1.0)
    board = RocBoard(tmp_path / "runs", sampler=sampler, export_dir=tmp_path / "exports", health=settings)
    state = board.store.create("hung", "mi250", "m", {"config.yaml": "", "train.log": ""})
    board.run_manager.launch(state.id, {}, command=[sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        hang_after_training(board, gpus, state.id)
        stall = wait_alert(board, state.id, "stall")
        again = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports-2", health=settings)
        again.decisions.follow(state.id)
        seen_past(again, state.id, stall.at + 2)
        seen_past(board, state.id, stall.at + 2)
        assert [e.kind for e in read_events(board.store.run_dir(state.id))] == ["stall"]
        assert board.store.read(state.id).active  # stop-on-stall is off: the run is left alone
    finally:
        board.stop(state.id)
        sampler.stop()
