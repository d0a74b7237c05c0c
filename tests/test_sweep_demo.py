"""A 2 x 2 sweep of the CPU demo with the real llamafactory-cli (issue 30 §2's proof): every run
queued through the page's Start, all four finish, and the ranked table's order is the order of
the runs' own final losses as their trainer_log.jsonl says; `status --sweep` prints that order;
the sweep's end is recorded once and said to the notifier. The one end-to-end test of sweeps."""

from __future__ import annotations

import io
import json
import os

import pytest

from backend.service import RocBoard, demo_form
from backend.sweep.desk import SweepDesk
from backend.sweep.record import read_record
from backend.sweep.spec import Axis, SweepSpec
from tests.harness import wait_until
from tests.tiers import starts


class Recorder:
    """Stands in for the app's notifier: keeps what it was sent."""

    def __init__(self) -> None:
        self.events: list = []

    def send(self, event) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass

    def recent(self, *args, **kwargs):
        return []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead too: its state in /proc says Z.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def final_loss_from_the_file(run_dir) -> float:
    lines = [json.loads(line) for line in (run_dir / "output" / "trainer_log.jsonl").read_text().splitlines() if line.strip()]
    return [line["loss"] for line in lines if "loss" in line][-1]


@starts("lf_helper", "trainer")
def test_a_two_by_two_sweep_of_the_demo_ranks_its_runs_by_their_own_logs(tmp_path, demo_assets, monkeypatch):
    from backend.runs_cli import status_main

    monkeypatch.delenv("ROCBOARD_WARM_START", raising=False)
    runs = tmp_path / "runs"
    board = RocBoard(runs, warm_helper=True)
    recorder = Recorder()
    board.notifier = recorder  # type: ignore[assignment]
    desk = SweepDesk(board)
    try:
        board.keep_queue()
        form = {**demo_form(), "max_steps": 6, "save_steps": 100, "cutoff_len": 64}
        spec = SweepSpec((Axis("learning_rate", ("1e-2", "1e-4")), Axis("lora_rank", ("4", "8"))))

        # Nothing half-made: the third Start fails (as a full disk would) after two runs were
        # made, one of them training: both are taken back, its trainer stopped, no record kept.
        real_start, made = board.start, []

        def failing_start(form, **kwargs):
            if len(made) == 2:
                raise OSError(28, "No space left on device")
            result = real_start(form, **kwargs)
            made.append(result.run)
            return result

        monkeypatch.setattr(board, "start", failing_start)
        with pytest.raises(OSError):
            desk.create(spec, form, "sw")
        monkeypatch.setattr(board, "start", real_start)
        assert len(made) == 2 and made[0].active and made[0].pid and made[1].state == "queued"
        assert board.store.list() == [] and not (runs / "sweeps").exists()
        assert not any(_alive(state.pid) for state in made if state.pid)

        record = desk.create(spec, form, "sw")
        assert [m.name for m in record.runs] == ["sw-lr0.01-r4", "sw-lr0.01-r8", "sw-lr1e-4-r4", "sw-lr1e-4-r8"]
        assert all(board.run_manager.refresh(m.run_id).alive for m in record.runs)  # each started or queued
        assert {board.store.read(m.run_id).name for m in record.runs} == {m.name for m in record.runs}

        view = wait_until(lambda: (v := desk.view(record.id)).finished and v, 400, interval=1.0, what="the sweep's four runs to end")
        assert [row.state for row in view.rows] == ["finished"] * 4
        own = {row.run_id: final_loss_from_the_file(board.store.run_dir(row.run_id)) for row in view.rows}
        assert [row.run_id for row in view.rows] == sorted(own, key=own.__getitem__)
        assert [row.final_loss for row in view.rows] == [own[row.run_id] for row in view.rows]
        assert view.best_run_id == view.rows[0].run_id
        assert all(row.tokens_per_s and row.duration_s for row in view.rows)
        assert len(view.overlay["data"]) == 4
        # Its end: recorded once (by the app's queue keeper), said once.
        wait_until(lambda: read_record(runs, record.id).finished_at is not None, 30, interval=0.5, what="the sweep's end recorded")
        desk.view(record.id)
        board.sweeps.look_after()
        ends = [e for e in recorder.events if getattr(e, "kind", "") == "sweep_finished"]
        assert len(ends) == 1 and ends[0].sweep_id == record.id and ends[0].figures["best_run"] == view.best_run_id

        out = io.StringIO()
        assert status_main(["--sweep", record.id, "--runs-dir", str(runs)], out, io.StringIO()) == 0
        lines = out.getvalue().splitlines()
        assert [line.split()[1] for line in lines[1:5]] == [row.run_id for row in view.rows]
        assert lines[5] == f"best run: {view.best_run_id}"

        # Runs added later: a value of the LoRA rank makes the grid's new points (one per learning
        # rate), then the rest cancelled and the one running stopped: none of the sweep is left alive.
        more = desk.add_runs(record.id, (Axis("lora_rank", ("16",)),))
        added = more.runs[4:]
        assert [m.name for m in added] == ["sw-lr0.01-r16", "sw-lr1e-4-r16"] and len(more.runs) == 6
        assert dict(more.axes)["lora_rank"] == (4, 8, 16)
        assert read_record(runs, record.id).finished_at is None
        cancelled = desk.cancel_rest(record.id)
        assert cancelled, "with one run here at a time, or two on the demo's one CPU slot, the second one waits"
        assert all(board.store.read(run_id).stop_reason == "reason.cancelled_in_queue" for run_id in cancelled)
        desk.stop_all(record.id)
        assert not any(board.run_manager.refresh(m.run_id).alive for m in more.runs)
        assert {board.store.read(m.run_id).state for m in added} <= {"stopped", "finished"}
    finally:
        desk.close()
        for run in board.store.list():
            if run.alive:
                board.stop(run.id)
        board.close()


@starts("lf_helper", "trainer")
def test_sweep_wait_keeps_the_queue_and_prints_the_ranked_runs(tmp_path, demo_assets):
    """`app.py sweep --wait` with one run (the cheap case: the grid itself is the test above):
    it queues, stays until the run ends, and prints the table."""
    from backend.sweep.cli import sweep_main
    from backend.sweep.record import list_sweeps

    runs = tmp_path / "runs"
    board = RocBoard(runs)
    config = tmp_path / "tiny.yaml"
    config.write_text(board.preview({**demo_form(), "max_steps": 3, "save_steps": 100, "cutoff_len": 64}, ask_llamafactory=False).yaml_text)
    out, err = io.StringIO(), io.StringIO()
    try:
        assert sweep_main([str(config), "--vary", "lora_rank=4", "--wait", "--runs-dir", str(runs)], out, err) == 0, err.getvalue()
    finally:
        for run in board.store.list():
            if run.alive:
                board.stop(run.id)
    (sweep_id,) = list_sweeps(runs)
    lines = out.getvalue().splitlines()
    assert lines[0] == sweep_id
    assert lines[1] == f"sweep {sweep_id}: 1 runs, ranked by final training loss"
    record = read_record(runs, sweep_id)
    (run_id,) = [m.run_id for m in record.runs]
    assert lines[2].startswith(f"1. {run_id}  lora_rank=4  finished  ") and run_id.endswith("tiny-r4")
    assert lines[3:] == [f"best run: {run_id}", "Every run of the sweep has ended."]
    assert record.finished_at is not None and board.store.read(run_id).state == "finished"
