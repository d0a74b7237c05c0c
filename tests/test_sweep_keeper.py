"""The app looks after every sweep on its own (its queue keeper, backend/sweep/desk.py
look_after), whoever made it: on stand-in trainers that write trainer_log.jsonl eval losses
(no LLaMA-Factory, so it is quick), a sweep recorded as `app.py sweep` in another shell would
record it, with no process following it: its clearly losing run is stopped with
reason.sweep_losing and the others are not, and its end is posted once to a local receiver,
though two apps keep the same runs directory and a restarted one looks at it again."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

from backend.notify import Notifier
from backend.service import LlamaFactoryCheckCache, RocBoard
from backend.sweep.record import SweepMember, SweepRecord, new_sweep_id, read_record, write_record
from tests.harness import wait_until
from tests.test_notify import Receiver, settings

pytestmark = pytest.mark.slow

# An eval point at step 10 (as LLaMA-Factory logs it: a line with eval_loss and no loss), then
# the trainer ends after `then` seconds (the losing one would train on for two minutes).
STAND_IN = textwrap.dedent(
    """
    import json, os, sys, time
    os.makedirs("output", exist_ok=True)
    with open("output/trainer_log.jsonl", "a") as log:
        log.write(json.dumps({"current_steps": 10, "total_steps": 20, "loss": 2.0}) + "\\n")
        log.write(json.dumps({"current_steps": 10, "total_steps": 20, "eval_loss": float(sys.argv[1])}) + "\\n")
        log.flush()
    time.sleep(float(sys.argv[2]))
    """
)


def board_on(runs, exports, receiver: Receiver) -> RocBoard:
    return RocBoard(runs, export_dir=exports, lf_cache=LlamaFactoryCheckCache(check=lambda args: []), notifier=Notifier(settings(receiver.url())))


def launch(board: RocBoard, name: str, eval_loss: float, seconds: float) -> str:
    state = board.store.create(name, "cpu-demo", "m", {"config.yaml": "", "train.log": ""})
    board.run_manager.launch(state.id, {}, command=[sys.executable, "-c", STAND_IN, str(eval_loss), str(seconds)])
    return state.id


def test_the_app_stops_a_sweeps_losing_run_and_says_its_end_once(tmp_path):
    runs, receiver = tmp_path / "runs", Receiver()
    board = board_on(runs, tmp_path / "exports", receiver)
    other = None
    try:
        # Three runs near 1.5 that end after a few seconds, one at 3.0 that would train on.
        losses = {"lr1e-4": 1.5, "lr2e-4": 1.4, "lr5e-4": 1.6, "lr1e-2": 3.0}
        ids = {name: launch(board, f"sw-{name}", loss, 120 if loss > 2 else 3) for name, loss in losses.items()}
        sweep_id = new_sweep_id()
        members = tuple(SweepMember(ids[name], f"sw-{name}", (("learning_rate", name[2:]),)) for name in losses)
        # Made elsewhere (nobody follows it): K = 1 eval point, a margin of 10%.
        write_record(runs, SweepRecord(sweep_id, "sw", "2026-01-01T00:00:00+00:00", (("learning_rate", tuple(losses)),), 0, {}, members, "final_eval_loss", early_stop=(1, 0.1)))
        # Two apps keep this runs directory; each looks after the sweep.
        other = board_on(runs, tmp_path / "exports-2", receiver)
        board.keep_queue()
        other.keep_queue()

        losing = ids["lr1e-2"]
        stopped = wait_until(lambda: (s := board.store.read(losing)).state == "stopped" and s, 30, interval=0.2, what="the losing run stopped")
        assert stopped.stop_reason == "reason.sweep_losing"
        assert stopped.stop_reason_params == {"step": "10", "loss": "3", "median": "1.55"}
        record = wait_until(lambda: (r := read_record(runs, sweep_id)).finished_at is not None and r, 30, interval=0.2, what="the sweep's end recorded")
        wait_until(lambda: any(body["event"] == "sweep_finished" for _, body in receiver.posts), 20, interval=0.2, what="the sweep's end posted")
        for name in ("lr1e-4", "lr2e-4", "lr5e-4"):
            state = board.store.read(ids[name])
            assert state.state == "finished" and state.stop_reason != "reason.sweep_losing", (name, state)

        # A restarted app (a new board on the same runs directory) does not say it again.
        board.close()
        again = board_on(runs, tmp_path / "exports-3", receiver)
        again.sweeps.look_after()
        again.close()
        time.sleep(3 * 2.0)  # a few more turns of the other app's keeper
        assert other.notifier.idle(10) and board.notifier.idle(10)
        ends = [body for _, body in receiver.posts if body["event"] == "sweep_finished"]
        assert len(ends) == 1, ends
        assert ends[0]["sweep"] == sweep_id and ends[0]["figures"]["best_run"] == ids["lr2e-4"]
        assert read_record(runs, sweep_id).finished_at == record.finished_at
    finally:
        for one in (board, other):
            if one is None:
                continue
            one.run_manager.stop_keeping_queue()
            for state in one.store.list():
                if state.active:
                    one.stop(state.id)
            one.close()
        receiver.close()
