"""The run manager side by side (issue 30 §1): queued runs on a 2-GPU node start on their own
GPUs, each with its own MASTER_PORT, a 2-GPU run waits for two free GPUs while 1-GPU runs
behind it wait too, and a new run manager on the same runs (a restarted app) knows which GPUs
the live runs hold. The trainers are stand-ins (a real process that sleeps, started through
the real launcher): what is checked is each process's environment, read from /proc."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from backend.runs import LAUNCH_FILE, RunStore
from backend.runs.queue import RunQueue, launch_file, read_launch_gpus
from backend.service import RocBoard
from backend.service.run_manager import RunManager, gpus_asked

STAND_IN = [sys.executable, "-c", "import time; time.sleep(120)"]
TORCHRUN_ENV = {"FORCE_TORCHRUN": "1", "NNODES": "1", "NODE_RANK": "0", "NPROC_PER_NODE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


def manager(runs: Path, monkeypatch, node: tuple[int, ...] = (0, 1)) -> RunManager:
    board = RocBoard(runs)
    run_manager = board.run_manager
    run_manager.set_node(node)
    launcher = run_manager.launcher
    real_start = launcher.start
    monkeypatch.setattr(launcher, "start", lambda run_id, env, command=None: real_start(run_id, env, command=STAND_IN))
    return run_manager


def queue_run(store: RunStore, name: str, asked: int) -> str:
    run_id = store.new_run_id(name)
    RunQueue(store).join(run_id)
    files = {LAUNCH_FILE: launch_file(dict(TORCHRUN_ENV), asked), "train.log": ""}
    return store.create(name=name, preset="cpu-demo", model="demo", files=files, run_id=run_id, state="queued").id


def test_runs_start_on_their_own_gpus_and_ports_and_a_two_gpu_run_is_not_starved(runs, monkeypatch):
    rm = manager(runs, monkeypatch)
    store = rm.store
    r1, r2, big, r3 = (queue_run(store, name, asked) for name, asked in (("r1", 1), ("r2", 1), ("big", 2), ("r3", 1)))
    first = rm.advance_queue()
    assert first is not None and first.id == r1
    assert [store.read(i).state for i in (r1, r2, big, r3)] == ["running", "running", "queued", "queued"]
    envs = {i: environ(store.read(i).pid) for i in (r1, r2)}
    assert (envs[r1]["HIP_VISIBLE_DEVICES"], envs[r2]["HIP_VISIBLE_DEVICES"]) == ("0", "1")
    assert all(env["CUDA_VISIBLE_DEVICES"] == env["HIP_VISIBLE_DEVICES"] and "ROCR_VISIBLE_DEVICES" not in env for env in envs.values())
    assert envs[r1]["MASTER_PORT"] != envs[r2]["MASTER_PORT"]
    assert (rm.gpus_of(r1), rm.gpus_of(r2)) == ((0,), (1,))
    # `app.py status` and the Runs tab's table say which GPUs each run has (en and zh-CN)
    from backend.runs.history import summaries_table, summarize_runs
    from backend.runs_cli import _status_line, run_status

    board = RocBoard(runs)
    status = run_status(board, r2)
    assert status["gpus"] == [1] and "GPUs 1" in _status_line(status, "en") and "占用 GPU 1" in _status_line(status, "zh-CN")
    assert "gpus" not in run_status(board, r3)
    where = {row[0]: row[1] for row in summaries_table(summarize_runs(store), "en", ("run", "where"))}
    assert (where[r1], where[r2], where[r3]) == ("this machine · GPUs 0", "this machine · GPUs 1", "this machine")

    # A restarted app (a new run manager on the same runs) knows the held GPUs: nothing starts.
    again = manager(runs, monkeypatch)
    assert again.reattach().id in (r1, r2)
    assert [store.read(i).state for i in (big, r3)] == ["queued", "queued"]

    # The node as a view shows it: who holds each GPU, who waits for what (nothing started).
    from backend.runs.gpu_slots import Wait

    view = again.node_view()
    assert (view.holder(0), view.holder(1)) == (r1, r2) and view.decision.start == ()
    assert view.decision.waiting == (Wait(big, "busy", (r1, r2)), Wait(r3, "busy", (r1, r2)))

    # r1 ends: GPU 0 is kept for the 2-GPU run at the head; r3 behind it does not take it.
    again.stop(r1)
    view = again.node_view()
    assert view.holder(0) is None and view.decision.reserved == {0: big}
    assert view.decision.waiting == (Wait(big, "busy", (r2,)), Wait(r3, "reserved", (), big))
    assert again.advance_queue() is None
    assert [store.read(i).state for i in (big, r3)] == ["queued", "queued"]
    # r2 ends: the 2-GPU run starts on both, with a port of its own; r3 still waits.
    again.stop(r2)
    started = again.advance_queue()
    assert started is not None and started.id == big
    env = environ(store.read(big).pid)
    assert env["HIP_VISIBLE_DEVICES"] == "0,1" and read_launch_gpus(runs / big) == (2, (0, 1))
    assert store.read(r3).state == "queued"
    again.stop(big)
    assert again.advance_queue().id == r3
    assert environ(store.read(r3).pid)["HIP_VISIBLE_DEVICES"] == "0"


def test_a_queued_run_asking_more_gpus_than_the_node_has_fails_and_the_next_starts(runs, monkeypatch):
    rm = manager(runs, monkeypatch)
    store = rm.store
    too_many, fine = queue_run(store, "too-many", 3), queue_run(store, "fine", 1)
    assert rm.advance_queue().id == fine
    failed = store.read(too_many)
    assert (failed.state, failed.stop_reason) == ("failed", "reason.queue_start_failed")
    assert failed.stop_reason_params["error"] == "3 GPUs asked, the node has 2"
    assert RunQueue(store).queued() == []


def test_one_slot_is_the_old_rule_and_a_plan_asks_its_gpu_count(runs, monkeypatch):
    from backend.config.distributed import DistributedPlan

    one = manager(runs, monkeypatch, node=(0,))
    assert not one.side_by_side and one.node_view() is None
    rm = manager(runs, monkeypatch)
    assert rm.side_by_side
    assert gpus_asked(None) == 1
    assert gpus_asked(DistributedPlan(gpus=(2, 5, 6), nproc=3)) == 3
    assert gpus_asked(DistributedPlan(nproc=4, on_cpu=True)) == 1  # CPU workers share one slot
    with pytest.raises(ValueError):
        rm.set_node((0, 0))


def test_a_resume_waits_in_the_queue_for_a_gpu(runs, monkeypatch):
    from tests.test_resume import make_run

    rm = manager(runs, monkeypatch)
    store = rm.store
    r1, r2 = queue_run(store, "r1", 1), queue_run(store, "r2", 1)
    rm.advance_queue()
    assert rm.gpus_of(r1) == (0,)
    stopped = make_run(store)
    resumed = rm.resume(stopped)
    assert resumed.findings == [] and resumed.run.state == "queued"  # both GPUs are held
    assert resumed.run.pid is None and read_launch_gpus(runs / stopped) == (1, None)
    rm.stop(r2)
    assert rm.advance_queue().id == stopped
    state = store.read(stopped)
    assert (state.state, state.attempts) == ("running", 2) and rm.gpus_of(stopped) == (1,)
    assert environ(state.pid)["HIP_VISIBLE_DEVICES"] == "1"
