"""The memory chart of a watched run, from a fake sysfs tree (two AMD cards and an
integrated GPU) and from process memory, through the real sampler and run files."""

from __future__ import annotations

import sys

from backend.charts import memory_figure
from backend.service import RocBoard
from backend.telemetry.fake_sysfs import build_fake_sysfs
from backend.telemetry.sampler import Sampler
from backend.view import gpu_table_markdown, memory_title
from tests.harness import wait_for


def watch_sleeper(board: RocBoard):
    state = board.store.create("sleeper", "rx7900xtx", "m", {"config.yaml": "", "train.log": ""})
    # A stand-in trainer, launched the way the run manager launches one: the sampler follows it.
    return board.run_manager.launch(state.id, {}, command=[sys.executable, "-c", "import time; time.sleep(30)"])


def wait_for_series(board, run_id, count, timeout=20):
    """The run's snapshot once it charts `count` series of two points or more, else the last one."""

    def charted():
        snapshot = board.snapshot(run_id)
        return snapshot if len(snapshot.memory) >= count and all(len(s.times) >= 2 for s in snapshot.memory) else None

    return wait_for(charted, timeout, interval=0.3) or board.snapshot(run_id)


def test_gpu_chart_from_a_fake_sysfs_tree(tmp_path):
    sampler = Sampler(interval_s=0.2, sysfs_root=build_fake_sysfs(tmp_path / "sys"))
    sampler.start()
    board = RocBoard(tmp_path / "runs", sampler=sampler, export_dir=tmp_path / "exports")
    state = watch_sleeper(board)
    try:
        snapshot = wait_for_series(board, state.id, 2)
        gpus = [s for s in snapshot.memory if s.source == "sysfs"]
        assert len(gpus) == 2, [(s.label, s.source) for s in snapshot.memory]  # the carve-out iGPU is left out
        figure = memory_figure(snapshot.memory, memory_title(snapshot))
        names = [trace["name"] for trace in figure["data"]]
        assert sum(name.endswith("used") for name in names) == 2
        assert sum(name.endswith("total") for name in names) == 2  # a capacity line per GPU
        assert "sysfs" in memory_title(snapshot)
        table = gpu_table_markdown(snapshot)
        assert table.count("\n") == 3 and "°C" in table and "W" in table
        # The samples are on disk: a fresh board (a restarted server) draws the same lines.
        again = RocBoard(tmp_path / "runs").snapshot(state.id)
        assert {s.label for s in again.memory} >= {s.label for s in gpus}
    finally:
        board.stop(state.id)
        sampler.stop()


def test_cpu_run_shows_process_memory_labelled_as_such(tmp_path):
    sampler = Sampler(interval_s=0.2, sysfs_root=tmp_path / "empty-sys")
    sampler.start()
    board = RocBoard(tmp_path / "runs", sampler=sampler, export_dir=tmp_path / "exports")
    state = watch_sleeper(board)
    try:
        snapshot = wait_for_series(board, state.id, 1)
        assert [s.source for s in snapshot.memory] == ["process"]
        assert snapshot.memory[0].used_gib[-1] > 0
        assert memory_title(snapshot) == "CPU RAM of the training process"
        assert gpu_table_markdown(snapshot) == ""
    finally:
        board.stop(state.id)
        sampler.stop()


def test_the_memory_chart_breaks_between_attempts_and_where_nothing_was_measured(tmp_path):
    """No line across the time no training process existed: between a run's attempts (at the
    resume line of its trainer log) and wherever no reading came for a while."""
    import json

    from backend.runs import OUTPUT_DIR, RunStore
    from backend.runs.logs import TRAINER_LOG, AttemptStart
    from backend.service.monitors import MEMORY_GAP_S
    from backend.service.run_view import charts_of

    store = RunStore(tmp_path / "runs")
    state = store.create("resumed", "cpu-demo", "m", {"config.yaml": "", "train.log": ""})
    run_dir = store.run_dir(state.id)
    start = 1_700_000_000.0
    # Attempt 1 measured for 5 s; resumed at 8 s; attempt 2 from 9 s to 12 s, then silent
    # for longer than the gap, then measured again.
    times = [0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 12 + MEMORY_GAP_S + 5, 12 + MEMORY_GAP_S + 6]
    readings = [{"gpu": 0, "used_bytes": 2**30, "total_bytes": None, "util_pct": None, "temp_c": None, "power_w": None, "source": "process", "at": start + t} for t in times]
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in readings))
    (run_dir / OUTPUT_DIR).mkdir()
    line = {"current_steps": 5, "total_steps": 30, "loss": 1.0, "lr": 0.01, "epoch": 0.1, "percentage": 16.7, "elapsed_time": "0:00:05", "remaining_time": "0:00:25"}
    (run_dir / OUTPUT_DIR / TRAINER_LOG).write_text(json.dumps(line) + "\n" + json.dumps(AttemptStart(2, 5, None, start + 8).record()) + "\n")
    store.update(state.id, state="stopped", pid=None, pid_started=None)

    board = RocBoard(tmp_path / "runs", export_dir=tmp_path / "exports")
    figure = charts_of(board.snapshot(state.id))["memory"]
    used = figure["data"][0]
    gaps = [x for x, y in zip(used["x"], used["y"], strict=True) if y is None]
    assert gaps == [8.0, 12 + MEMORY_GAP_S + 5], list(zip(used["x"], used["y"], strict=True))
    assert [a["text"] for a in figure["layout"]["annotations"]] == ["attempt 2"]
    assert [s["x0"] for s in figure["layout"]["shapes"]] == [8.0]
    loss = charts_of(board.snapshot(state.id), "zh-CN")["loss"]
    assert [(a["x"], a["text"]) for a in loss["layout"]["annotations"]] == [(5.0, "第 2 次尝试")]
