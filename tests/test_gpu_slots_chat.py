"""Chat and evaluation per GPU on a node of several (issue 30): a chat load takes a GPU the
allocator says is free now and its server sees only that GPU; a run is given the chat's GPU
last, and the chat lets go only when a run is given it; an evaluation asks one GPU like a run
(it starts on a free one, or waits in the queue). One slot keeps the old rules
(tests/test_chat.py, tests/test_chat_concurrency.py, tests/test_evaluate.py).

The node is a simulated 2-GPU sysfs (backend/telemetry/fake_sysfs.py) read as ui/serve.py
reads /sys, with the app's sampler on it. Trainers are stand-ins through the real launcher
(tests/test_gpu_slots_queue.py); a chat server is a stand-in worker started by the real
ChatServer (a process that sleeps: it loads nothing, so the session stays "loading", which is
enough to see its GPU, its let-go and its memory chart). What is checked is each process's
environment, read from /proc, and the samples written for it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from backend.i18n import render_message, translate
from backend.runs import CONFIG_FILE, FORM_FILE, LOG_FILE, RunStore
from backend.runs.gpu_slots import Ask, Wait, decide, guest_gpu, node_gpus
from backend.runs.queue import read_launch_gpus
from backend.service import RocBoard, demo_form
from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards, set_vram_used
from tests.harness import ROOT, kill_processes, wait_until
from tests.test_chat import chat_servers
from tests.test_gpu_slots_queue import STAND_IN, environ, queue_run

USED = {0: 3 * 2**30, 1: 7 * 2**30}  # card N is HIP device N: each GPU's VRAM tells them apart


def test_a_chat_takes_a_gpu_no_run_holds_or_waits_for_and_runs_take_its_gpu_last():
    node = (0, 1)
    # a count is given GPUs the chat does not use first, the chat's only when needed
    assert decide(node, {}, [Ask("r")], avoid={0}).start[0].gpus == (1,)
    assert decide(node, {"a": (1,)}, [Ask("r")], avoid={0}).start[0].gpus == (0,)
    assert decide((0, 1, 2, 3), {}, [Ask("r", 2)], avoid={1}).start[0].gpus == (0, 2)
    # the chat asks behind every queued run
    assert guest_gpu(node, {}, []) == (0, None)
    assert guest_gpu(node, {"a": (0,)}, []) == (1, None)
    assert guest_gpu(node, {"a": (0,)}, [Ask("q")]) == (None, Wait("", "busy", ("a", "q")))  # q starts on GPU 1 now
    assert guest_gpu(node, {"a": (0,), "b": (1,)}, []) == (None, Wait("", "busy", ("a", "b")))
    assert guest_gpu(node, {"a": (0,)}, [Ask("big", 2)]) == (None, Wait("", "reserved", (), "big"))


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A RocBoard on a simulated 2-GPU node with its sampler on it; trainers and chat servers
    are stand-ins; a finished run with an adapter to chat with."""
    from backend.telemetry.sampler import Sampler

    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(2), bmc_vga=False)
    for card, used in USED.items():
        set_vram_used(sysfs, card, used)
    worker = tmp_path / "stand-in" / "api_worker.py"  # chat_servers() finds it by this name
    worker.parent.mkdir()
    worker.write_text("import sys, time\nsys.stdin.read()\n")  # lives until its stdin closes (ChatServer.stop)
    monkeypatch.setattr("backend.chat.server.WORKER", worker)
    runs = tmp_path / "runs"
    sampler = Sampler(interval_s=0.3, sysfs_root=sysfs)
    sampler.start()
    board = RocBoard(runs, sampler=sampler, export_dir=tmp_path / "exports")
    board.set_node(node_gpus(sysfs))
    launcher = board.run_manager.launcher
    real_start = launcher.start
    monkeypatch.setattr(launcher, "start", lambda run_id, env, command=None: real_start(run_id, env, command=STAND_IN))
    store = board.store
    form = {**demo_form(), "model_path": str(ROOT / "demo" / "model")}
    chat_run = store.create("tuned", "cpu-demo", form["model_path"], {FORM_FILE: json.dumps(form), LOG_FILE: ""}, state="finished").id
    (runs / chat_run / "output").mkdir()
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (runs / chat_run / "output" / name).write_text("{}")
    yield board, chat_run
    board.chat.close()
    sampler.stop()
    kill_processes(chat_servers(runs))
    from backend.runs.launcher import ProcessIdentity, stop_tree

    for state in RunStore(runs).list():
        if state.active and state.pid and state.pid_started:
            stop_tree(ProcessIdentity(state.pid, state.pid_started, state.pid_start_key), graceful_s=0)


def chat_readings(runs: Path, run_id: str) -> list[dict]:
    path = runs / run_id / "chat" / "samples.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r.get("source") == "sysfs"]


@pytest.mark.timeout(120)
def test_chat_keeps_its_gpu_while_runs_start_beside_it_and_lets_go_when_a_run_needs_it(node):
    board, chat_run = node
    rm, store, runs = board.run_manager, board.store, board.store.root
    assert rm.node == (0, 1)

    # both GPUs free: the chat takes GPU 0; its server sees only that one
    status = next(board.chat.load(chat_run))
    assert status.state == "loading", status.findings
    [server] = chat_servers(runs)
    env = environ(server.pid)
    assert env["HIP_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == "0" and "ROCR_VISIBLE_DEVICES" not in env
    # its memory chart is its GPU's (a sampler of its own reads the server's *_VISIBLE_DEVICES)
    wait_until(lambda: chat_readings(runs, chat_run), 30, interval=0.3, what="the chat server's GPU samples")
    readings = chat_readings(runs, chat_run)
    assert {r["gpu"] for r in readings} == {0} and {r["used_bytes"] for r in readings} == {USED[0]}
    assert board.chat.memory_series()

    # a run is given the GPU no chat uses: the chat stays loaded
    a = queue_run(store, "a", 1)
    assert rm.advance_queue().id == a
    assert environ(store.read(a).pid)["HIP_VISIBLE_DEVICES"] == "1"
    assert board.chat.status().state == "loading" and [p.pid for p in chat_servers(runs)] == [server.pid]
    view = rm.node_view()
    assert view.chat == {0: chat_run} and view.holder(1) == a
    for locale, words in (("en", "chat with"), ("zh-CN", "对话")):
        panel = board.node_markdown(locale)
        assert panel is not None
        row = next(line for line in panel.splitlines() if line.startswith("| 0 |"))
        assert words in row and chat_run in row and "3.0 / 64.0 GiB" in row  # the chat sampler's reading of GPU 0
    # the app's sampler follows run a; the chat's chart still shows GPU 0 only
    count = len(chat_readings(runs, chat_run))
    wait_until(lambda: len(chat_readings(runs, chat_run)) > count, 30, interval=0.3, what="more chat samples beside a run")
    assert {r["used_bytes"] for r in chat_readings(runs, chat_run)} == {USED[0]}

    # a run that needs the chat's GPU (the only one free) makes it let go
    b = queue_run(store, "b", 1)
    assert rm.advance_queue().id == b
    assert environ(store.read(b).pid)["HIP_VISIBLE_DEVICES"] == "0"
    assert board.chat.status().state == "stopped"
    wait_until(lambda: chat_servers(runs) == [], 15, interval=0.2, what="the chat server to let go")
    assert rm.node_view().chat == {}

    # every GPU held: a load is refused, naming the runs that hold them (nothing started)
    refused = list(board.chat.load(chat_run))
    assert [s.state for s in refused] == ["refused"]
    [finding] = refused[-1].findings
    assert finding.rule == "chat-gpus-busy" and a in finding.problem and b in finding.problem
    zh = render_message("check.chat-gpus-busy.problem", finding.params or {}, "zh-CN")
    assert a in zh and b in zh and "GPU" in zh
    # the free GPU kept for a queued 2-GPU run: refused, naming it
    rm.stop(b)
    big = queue_run(store, "big", 2)
    assert rm.advance_queue() is None
    [finding] = list(board.chat.load(chat_run))[-1].findings
    assert finding.rule == "chat-gpus-kept" and big in finding.problem
    assert chat_servers(runs) == []


@pytest.mark.timeout(120)
def test_an_evaluation_asks_one_gpu_like_a_run_and_waits_its_turn(node):
    board, chat_run = node
    rm, store, runs = board.run_manager, board.store, board.store.root

    def evaluate(name: str):
        run_id = store.new_run_id(name)
        files = {CONFIG_FILE: "", LOG_FILE: ""}
        return rm.start_evaluation(run_id, name, "demo", "cpu-demo", files, chat_run, {"OMP_NUM_THREADS": "1"}, [])

    # a chat on GPU 0; the evaluation is given GPU 1 (the one no chat uses): the chat stays
    assert next(board.chat.load(chat_run)).state == "loading"
    first = evaluate("eval-one")
    assert first.run is not None and first.run.state == "running", first.findings
    env = environ(store.read(first.run.id).pid)
    assert env["HIP_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == "1" and "ROCR_VISIBLE_DEVICES" not in env
    assert env["OMP_NUM_THREADS"] == "1"
    assert read_launch_gpus(runs / first.run.id) == (1, (1,))
    assert board.chat.status().state == "loading"
    # a run beside it takes the chat's GPU (the only one left): the chat lets go
    a = queue_run(store, "a", 1)
    assert rm.advance_queue().id == a and rm.gpus_of(a) == (0,)
    assert board.chat.status().state == "stopped"
    # every GPU taken: the next evaluation waits in the queue, and says so
    second = evaluate("eval-two")
    assert second.run is not None and second.run.state == "queued" and second.findings == []
    for locale in ("en", "zh-CN"):
        assert board.evaluations.view(second.run.id, locale).status == translate("eval.status.queued", locale, run_id=f"`{second.run.id}`")
    assert board.evaluations.view(second.run.id).active  # Stop is offered: it takes it out of the queue
    # a restarted app (a new run manager) knows the evaluation's GPU from its launch.json
    again = RocBoard(runs)
    again.set_node((0, 1))
    assert again.run_manager.gpus_of(first.run.id) == (1,)
    assert again.run_manager.node_view().holder(1) == first.run.id
    # the first ends: the second starts on its GPU
    rm.stop(first.run.id)
    started = rm.advance_queue()
    assert started is not None and started.id == second.run.id
    assert environ(store.read(second.run.id).pid)["HIP_VISIBLE_DEVICES"] == "1"
    assert store.read(second.run.id).kind == "evaluate"


def test_one_slot_keeps_the_node_wide_rules(tmp_path, monkeypatch):
    board = RocBoard(tmp_path / "runs")
    board.set_node((0,))
    launcher = board.run_manager.launcher
    real_start = launcher.start
    monkeypatch.setattr(launcher, "start", lambda run_id, env, command=None: real_start(run_id, env, command=STAND_IN))
    store = board.store
    try:
        first = board.run_manager.start_evaluation(store.new_run_id("e1"), "e1", "demo", "cpu-demo", {CONFIG_FILE: "", LOG_FILE: ""}, "src", {}, [])
        assert first.run is not None and first.run.state == "running"
        assert board.run_manager.gpus_of(first.run.id) is None  # the whole machine, as before
        refused = board.run_manager.start_evaluation(store.new_run_id("e2"), "e2", "demo", "cpu-demo", {CONFIG_FILE: "", LOG_FILE: ""}, "src", {}, [])
        assert refused.run is None and [f.rule for f in refused.findings] == ["run-active"]
        assert board.chat._gpu_for_load()[1].rule == "chat-gpu-busy"
        # a trainer's start on one slot lets any chat go (gpus None)
        calls: list = []
        board.run_manager.before_launch.insert(0, calls.append)
        board.run_manager.stop(first.run.id)
        board.run_manager.start_evaluation(store.new_run_id("e3"), "e3", "demo", "cpu-demo", {CONFIG_FILE: "", LOG_FILE: ""}, "src", {}, [])
        assert calls == [None]
    finally:
        from backend.runs.launcher import ProcessIdentity, stop_tree

        for state in store.list():
            if state.active and state.pid and state.pid_started:
                stop_tree(ProcessIdentity(state.pid, state.pid_started, state.pid_start_key), graceful_s=0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
