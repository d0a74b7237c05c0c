"""The queue of this machine: a Start while a run trains here lines the run up; the queue is on
disk (queue.json and each queued run's directory), can be reordered and cancelled, and moves on
when the run training ends, across a restart of the app and from the command line too.

Real runs: the real llamafactory-cli on the demo model (about 10 s a run here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from itertools import pairwise

import pytest

from backend.runs import LAUNCH_FILE, RunStore
from backend.runs.queue import QUEUE_FILE, RunQueue, launch_file, read_launch_env
from backend.service import RocBoard, demo_form
from tests.harness import PYTHON, ROOT, AppServer, run_states, wait_until
from tests.tiers import starts

SHORT = {"max_steps": 30, "save_steps": 1000}


def queued_run(store: RunStore, name: str) -> str:
    return store.create(name=name, preset="cpu-demo", model="demo", files={LAUNCH_FILE: launch_file({"OMP_NUM_THREADS": "1"})}, state="queued").id


def test_the_order_joins_leaves_and_moves(tmp_path):
    store = RunStore(tmp_path / "runs")
    queue = RunQueue(store)
    ids = []
    for name in ("a", "b", "c"):
        run_id = store.new_run_id(name)
        queue.join(run_id)  # before the run exists, as RunManager does
        ids.append(store.create(name=name, preset="cpu-demo", model="demo", files={}, run_id=run_id, state="queued").id)
    assert [s.id for s in queue.queued()] == ids and queue.position(ids[2]) == 3
    assert queue.move(ids[2], -1) and [s.id for s in queue.queued()] == [ids[0], ids[2], ids[1]]
    assert not queue.move(ids[0], -1)  # already first
    assert queue.move(ids[0], +5) and [s.id for s in queue.queued()] == [ids[2], ids[1], ids[0]]
    queue.leave(ids[1])
    assert [s.id for s in queue.queued()] == [ids[2], ids[0]] and queue.position(ids[1]) is None
    # A run that is no longer queued is not in the queue, whatever queue.json says.
    store.update(ids[2], state="stopped")
    assert [s.id for s in queue.queued()] == [ids[0]]
    assert json.loads((store.root / QUEUE_FILE).read_text()) == [ids[2], ids[0]]


@pytest.mark.hostile
@pytest.mark.parametrize(
    "content",
    [b"not json", b'{"a": 1}', b'["../../etc", "/abs", "", 5, null]', b"[" + b'"x",' * 200_000 + b'"x"]', "[\"\u0000\"]".encode()],
)
def test_a_broken_queue_file_is_an_empty_queue(tmp_path, content):
    store = RunStore(tmp_path / "runs")
    store.ensure_root()
    (store.root / QUEUE_FILE).write_bytes(content)
    assert RunQueue(store).queued() == [] and RunQueue(store).order() == []


@pytest.mark.hostile
def test_a_queue_file_planted_as_a_link_is_not_followed(tmp_path):
    store = RunStore(tmp_path / "runs")
    store.ensure_root()
    elsewhere = tmp_path / "elsewhere.json"
    run_id = queued_run(store, "x")
    elsewhere.write_text(json.dumps([run_id]))
    (store.root / QUEUE_FILE).symlink_to(elsewhere)
    queue = RunQueue(store)
    assert queue.order() == []
    queue.join(run_id)  # writes a file of its own over the link, never through it
    assert json.loads(elsewhere.read_text()) == [run_id] and not (store.root / QUEUE_FILE).is_symlink()


@pytest.mark.hostile
def test_a_launch_file_planted_as_a_link_is_not_read(tmp_path):
    store = RunStore(tmp_path / "runs")
    run_id = store.create(name="x", preset="cpu-demo", model="demo", files={}, state="queued").id
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"env": {"LD_PRELOAD": "/tmp/evil.so"}}))
    (store.root / run_id / LAUNCH_FILE).symlink_to(secret)
    with pytest.raises(OSError):
        read_launch_env(store.run_dir(run_id))


def test_only_a_queued_run_is_cancelled_or_moved(tmp_path):
    board = RocBoard(tmp_path / "runs")
    run_id = board.store.create(name="done", preset="cpu-demo", model="demo", files={}, state="finished").id
    assert [f.rule for f in board.cancel_queued(run_id)] == ["not-queued"]
    assert board.move_queued(run_id, -1) is False
    assert board.store.read(run_id).state == "finished"


def test_a_command_line_that_sees_a_run_end_leaves_the_queue_to_the_app(tmp_path, monkeypatch):
    """`app.py stop` sees the run it stopped end; a start begun on its thread would die with
    it when it exits a moment later (a run left half-started). Only a process that keeps the
    queue (the app's keeper) starts the next one."""
    board = RocBoard(tmp_path / "runs")  # as runs_cli makes one: no keeper
    ended = board.store.create(name="ended", preset="cpu-demo", model="demo", files={}, state="finished").id
    waiting = queued_run(board.store, "next")
    board.run_manager.queue.join(waiting)
    handed_over: list[bool] = []
    advance = board.run_manager.advance_queue
    monkeypatch.setattr(board.run_manager, "advance_queue", lambda *a, **k: handed_over.append(True) or advance(*a, **k))
    threads_before = set(threading.enumerate())
    board.run_manager.launcher.on_end(ended)
    for thread in set(threading.enumerate()) - threads_before:
        thread.join(30)  # a hand-over thread, had one been started, has done its work
    assert handed_over == []
    assert board.store.read(waiting).state == "queued" and board.run_manager.queue.position(waiting) == 1


@starts("lf_helper", "trainer")
def test_a_double_click_before_the_tabs_load_gave_it_an_intent_is_one_start(tmp_path, demo_assets):
    """Start pressed the moment the page appears, on a busy machine: the tab's load has not yet
    given its form an intent. Its two Starts are still one (the tab's session names them); a
    queue would otherwise take the second as a run of its own."""
    from types import SimpleNamespace

    from ui.train_tab import start_intent

    board = RocBoard(tmp_path / "runs")
    tab, other_tab = SimpleNamespace(session_hash="abc123"), SimpleNamespace(session_hash="def456")
    empty = {"editing": True, "run_id": None, "intent": ""}
    assert start_intent(empty, tab) == "tab:abc123" and start_intent({**empty, "intent": "i-1"}, tab) == "i-1"
    form = {**demo_form(), "max_steps": 1_000_000, "run_name": "once"}
    first = board.start(form, intent=start_intent(empty, tab))
    try:
        second = board.start(form, intent=start_intent(empty, tab))
        assert second.run.id == first.run.id and len(board.store.list()) == 1 and board.queued_runs() == []
        elsewhere = board.start(form, intent=start_intent(empty, other_tab))  # another tab: its own run
        assert elsewhere.queued
        board.cancel_queued(elsewhere.run.id)
    finally:
        board.stop(first.run.id)


def test_the_keeper_lock_says_whether_an_app_moves_the_queue_on(tmp_path):
    queue = RunQueue(RunStore(tmp_path / "runs"))
    assert not queue.keeper_alive()
    held = queue.hold_keeper_lock()
    try:
        assert held is not None and queue.keeper_alive() and queue.hold_keeper_lock() is None
    finally:
        os.close(held)
    assert not queue.keeper_alive()


@pytest.mark.slow
def test_a_start_while_a_run_trains_queues_it_and_the_queue_runs_in_its_order(tmp_path, demo_assets):
    board = RocBoard(tmp_path / "runs")
    board.keep_queue()  # as the app does
    first = board.start({**demo_form(), **SHORT, "run_name": "first"}, intent="a")
    assert first.run.state == "running"
    second = board.start({**demo_form(), **SHORT, "run_name": "second"}, intent="b")
    third = board.start({**demo_form(), **SHORT, "run_name": "third"}, intent="c")
    assert second.queued and third.queued and second.findings == [] and third.findings == []
    assert [s.id for s in board.queued_runs()] == [second.run.id, third.run.id]
    assert "number 2 in line" in board.run_view(third.run.id).status
    assert board.run_view(third.run.id).active  # the page keeps asking: it starts on its own
    assert board.move_queued(third.run.id, -1)  # third goes first
    ids = [first.run.id, third.run.id, second.run.id]
    wait_until(lambda: all(board.store.read(i).state == "finished" for i in ids), 300, interval=0.5, what="the three runs to finish")
    states = [board.store.read(i) for i in ids]
    for before, after in pairwise(states):
        assert before.ended_at <= after.started_at  # one after the other, in the queue's order
    assert board.queued_runs() == [] and json.loads((board.store.root / QUEUE_FILE).read_text()) == []


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(ROOT / "app.py"), *argv], cwd=ROOT, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
@pytest.mark.timeout(900)  # five cold `app.py submit`s, an app restart and three runs in turn, on 2 busy cores
def test_three_queued_runs_survive_a_restart_finish_in_order_and_a_cancelled_one_never_starts(tmp_path, demo_assets):
    import yaml

    config = {
        "model_name_or_path": str(demo_assets.model_dir), "template": "llama3", "dataset_dir": str(demo_assets.dataset_dir), "dataset": "demo",
        "stage": "sft", "do_train": True, "finetuning_type": "lora", "cutoff_len": 128, "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1, "learning_rate": 0.01, "logging_steps": 1, "save_steps": 1000,
    }  # fmt: skip
    with AppServer(workdir=tmp_path / "app") as server:
        runs = server.runs_dir
        ids = {}
        for name, steps in (("training", 1_000_000), ("one", 5), ("two", 5), ("cancelled", 5), ("three", 5)):
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump({**config, "max_steps": steps, "run_name": name}))
            done = cli("submit", str(path), "--runs-dir", str(runs))
            assert done.returncode == 0, done.stderr
            ids[name] = done.stdout.strip()
            # an app keeps the queue: `submit` queues the run and the app starts it (its child)
            assert "queued: number" in done.stderr and "app keeping this runs directory starts it" in done.stderr, done.stderr
            if name == "training":
                wait_until(lambda: RunStore(runs).read(ids["training"]).state == "running", 120, interval=0.5, what="the app to start the first run")
        store = RunStore(runs)
        assert store.read(ids["training"]).state == "running"
        assert [s.id for s in RunQueue(store).queued()] == [ids[n] for n in ("one", "two", "cancelled", "three")]
        cancelled = cli("stop", ids["cancelled"], "--runs-dir", str(runs))
        assert cancelled.returncode == 0 and "stopped" in cancelled.stdout
        listed = cli("status", "--json", "--runs-dir", str(runs))
        positions = {s["id"]: s.get("queue_position") for s in json.loads(listed.stdout)}
        assert [positions[ids[n]] for n in ("one", "two", "three")] == [1, 2, 3]

        # The app dies while the first run trains; its trainer trains on; a new app takes the queue up.
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        assert store.read(ids["training"]).state == "running" and RunQueue(store).queued()
        server.spawn()
        wait_until(server.answers, 120, interval=0.5, what="the restarted app")
        assert f"Re-attached to run {ids['training']} (running)" in server.output()
        assert store.read(ids["one"]).state == "queued"  # it waits while the first trains
        stopped = cli("stop", ids["training"], "--runs-dir", str(runs))  # its end moves the queue on
        assert stopped.returncode == 0, stopped.stderr
        order = [ids[n] for n in ("training", "one", "two", "three")]
        wait_until(lambda: all(store.read(i).state == "finished" for i in order[1:]), 600, interval=1.0, what="every queued run to finish")
        assert store.read(ids["training"]).state == "stopped"
        states = [store.read(i) for i in order]
        for before, after in pairwise(states):
            assert before.ended_at <= after.started_at
        never = store.read(ids["cancelled"])
        assert (never.state, never.stop_reason, never.pid, never.started_at) == ("stopped", "reason.cancelled_in_queue", None, None)
        assert (runs / ids["cancelled"] / "train.log").read_text() == ""
        assert not (runs / ids["cancelled"] / "output").exists()
        assert all(state["state"] != "queued" for state in run_states(runs))
