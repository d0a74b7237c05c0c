"""Process-tree stop and run states, on real processes (no mocks)."""

import os
import signal
import sys
import textwrap
from dataclasses import replace

import psutil

from backend.runs import RunStore
from backend.runs.launcher import Launcher, ProcessIdentity, stop_tree
from backend.view import stop_reason_text
from tests.harness import wait_for

# A root that starts a child in its own session (as torchrun's workers are in their own
# process group) and that child starts a grandchild; all sleep until killed.
TREE = textwrap.dedent(
    """
    import subprocess, sys, time, os
    level = int(sys.argv[1])
    if level < 2:
        subprocess.Popen([sys.executable, __file__, str(level + 1)], start_new_session=(level == 0))
    open(os.path.join(os.environ["MARK_DIR"], f"up-{level}"), "w").close()
    time.sleep(600)
    """
)

# A trainer stand-in that, like LLaMA-Factory with LLAMABOARD_ENABLED=1, takes SIGABRT as
# "stop and save", and ignores SIGTERM so only the graceful path (or SIGKILL) ends it.
GRACEFUL = textwrap.dedent(
    """
    import os, signal, sys, time
    stop = False
    def on_abort(signum, frame):
        global stop
        stop = True
    signal.signal(signal.SIGABRT, on_abort)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open("up", "w").close()
    while not stop:
        time.sleep(0.05)
    open("saved", "w").close()
    sys.exit(0)
    """
)

STUBBORN = textwrap.dedent(
    """
    import signal, time
    signal.signal(signal.SIGABRT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open("up", "w").close()
    time.sleep(600)
    """
)


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_stop_tree_ends_every_process_even_in_other_sessions(tmp_path):
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    env = dict(os.environ, MARK_DIR=str(tmp_path))
    root = psutil.Popen([sys.executable, str(script), "0"], env=env, start_new_session=True)
    assert wait_for(lambda: all((tmp_path / f"up-{n}").exists() for n in range(3)), timeout=20)
    tree = [root.pid] + [c.pid for c in root.children(recursive=True)]
    assert len(tree) == 3
    # The child runs in its own session: a signal to our process group would miss it.
    assert os.getsid(tree[1]) != os.getsid(root.pid)
    left = stop_tree(ProcessIdentity(root.pid, root.create_time()), graceful_s=0.5, term_s=2)
    root.wait(5)
    assert left == []
    assert all(gone(pid) for pid in tree)


def test_stop_tree_escalates_to_sigkill(tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    root = psutil.Popen([sys.executable, str(script)], cwd=tmp_path, start_new_session=True)
    assert wait_for(lambda: (tmp_path / "up").exists(), timeout=20)
    left = stop_tree(ProcessIdentity(root.pid, root.create_time()), graceful_s=0.3, term_s=0.3)
    assert left == []
    assert root.wait(5) == -signal.SIGKILL


def test_stop_tree_refuses_a_reused_pid(tmp_path):
    me = psutil.Process()
    # Same pid, wrong start time: must not be touched.
    assert stop_tree(ProcessIdentity(me.pid, me.create_time() - 100)) == []
    assert me.is_running()


def make_run(store):
    return store.create(name="t", preset="cpu-demo", model="m", files={"config.yaml": "x: 1\n", "train.log": ""})


def test_launcher_graceful_stop_lets_the_trainer_save(tmp_path):
    store = RunStore(tmp_path / "runs")
    launcher = Launcher(store)
    run = make_run(store)
    run_dir = store.run_dir(run.id)
    (run_dir / "t.py").write_text(GRACEFUL)
    state = launcher.start(run.id, {}, command=[sys.executable, "t.py"])
    assert state.state == "running" and state.pid and state.pid_started
    assert wait_for(lambda: (run_dir / "up").exists(), timeout=20)
    final = launcher.stop(run.id)
    assert final.state == "stopped"
    assert (run_dir / "saved").exists()  # the SIGABRT path ran, not a kill
    assert final.exit_code == 0
    assert gone(state.pid)


def test_launcher_records_failure_and_success(tmp_path):
    store = RunStore(tmp_path / "runs")
    launcher = Launcher(store)
    failing = make_run(store)
    launcher.start(failing.id, {}, command=[sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"])
    assert wait_for(lambda: store.read(failing.id).state == "failed", timeout=20)
    assert store.read(failing.id).exit_code == 3
    assert "boom" in (store.run_dir(failing.id) / "train.log").read_text()
    ok = make_run(store)
    # A setting the allow-list lets through (backend/security/child_env.py) reaches the trainer.
    launcher.start(ok.id, {"NCCL_DEBUG": "42"}, command=[sys.executable, "-c", "import os; print(os.environ['NCCL_DEBUG'], os.environ['HF_HUB_OFFLINE'])"])
    assert wait_for(lambda: store.read(ok.id).state == "finished", timeout=20)
    assert "42 1" in (store.run_dir(ok.id) / "train.log").read_text()


def start_orphan(store, run, seconds):
    """A trainer started by a web server that has since died: only state.json knows it."""
    process = psutil.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], start_new_session=True)
    store.update(run.id, state="running", pid=process.pid, pid_started=process.create_time())
    return process


def test_refresh_after_restart_follows_then_settles_a_failed_run(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = make_run(store)
    process = start_orphan(store, run, 1.0)
    launcher = Launcher(store)  # the restarted server
    assert launcher.refresh(run.id).state == "running"
    assert launcher.live_pid(run.id) == process.pid
    process.wait(10)
    settled = launcher.refresh(run.id)
    assert settled.state == "failed"  # no adapter, no complete log
    # The state holds a message id; the page says it in its language (an old English one as written).
    assert settled.stop_reason == "reason.failed_unwatched"
    assert "not watching" in stop_reason_text(settled, "en")
    assert "RocBoard" in stop_reason_text(settled, "zh-CN") and "not watching" not in stop_reason_text(settled, "zh-CN")
    old = replace(settled, stop_reason="The trainer ended while RocBoard was not watching, before it finished.")
    assert stop_reason_text(old, "zh-CN") == old.stop_reason


def test_a_run_being_started_elsewhere_is_left_to_its_starter_and_settled_once_it_is_gone(tmp_path):
    """A start takes seconds before the trainer's pid is recorded; another process looking
    meanwhile (a tab's tick, `app.py status`) must not call it ended. Once the process that
    was starting it is gone with no trainer recorded, the start was interrupted."""
    store = RunStore(tmp_path / "runs")
    run = make_run(store)  # "starting", started by this process
    assert (run.state, run.starter_pid) == ("starting", os.getpid())
    other = Launcher(store)  # another process's launcher, looking at the same runs
    assert other.refresh(run.id).state == "starting"
    starter = psutil.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    identity = ProcessIdentity.of(starter.pid)
    assert identity is not None and identity.start_key
    store.update(run.id, starter_pid=starter.pid, starter_started=identity.started, starter_start_key=identity.start_key)
    starter.wait(10)  # it exits before it launched anything (a command line, killed mid-start)
    settled = other.refresh(run.id)
    assert (settled.state, settled.stop_reason, settled.pid) == ("failed", "reason.start_interrupted", None)
    assert "nothing trained" in stop_reason_text(settled, "en") and "未进行任何训练" in stop_reason_text(settled, "zh-CN")
    # A start that began launching here writes the trainer over the starter.
    fresh = make_run(store)
    launched = Launcher(store).start(fresh.id, {}, command=[sys.executable, "-c", "pass"])
    assert launched.pid is not None and (launched.starter_pid, launched.starter_started, launched.starter_start_key) == (None, None, "")
    assert launched.pid_start_key


def test_a_trainer_that_cannot_start_leaves_a_failed_run_not_a_starting_one(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = make_run(store)
    try:
        Launcher(store).start(run.id, {}, command=[str(tmp_path / "no-such-program")])
    except OSError:
        pass
    else:
        raise AssertionError("a missing program started")
    failed = store.read(run.id)
    assert (failed.state, failed.stop_reason, failed.pid) == ("failed", "reason.launch_failed", None)
    assert "no-such-program" in failed.stop_reason_params["error"]
    assert "could not start" in (store.run_dir(run.id) / "train.log").read_text()


def test_a_start_that_fails_before_the_trainer_leaves_a_failed_run_not_a_starting_one(tmp_path):
    """What runs before the trainer (letting the chat server go) failing is a failed start too:
    a run left "starting" behind this live process would hold the machine until it exits."""
    from backend.service import RocBoard

    board = RocBoard(tmp_path / "runs")
    run = make_run(board.store)

    def refuses(gpus: tuple[int, ...] | None = None) -> None:
        raise RuntimeError("chat server would not stop")

    board.run_manager.before_launch.insert(0, refuses)
    try:
        board.run_manager.launch(run.id, {}, command=[sys.executable, "-c", "pass"])
    except RuntimeError:
        pass
    else:
        raise AssertionError("the launch went on")
    failed = board.store.read(run.id)
    assert (failed.state, failed.stop_reason, failed.pid) == ("failed", "reason.launch_failed", None)
    assert board.run_manager.active_run() is None


def test_refresh_after_restart_settles_a_finished_run(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = make_run(store)
    output = store.run_dir(run.id) / "output"
    output.mkdir()
    (output / "trainer_log.jsonl").write_text('{"current_steps": 30, "total_steps": 30}\n')
    (output / "adapter_model.safetensors").write_bytes(b"x")
    process = start_orphan(store, run, 0.1)
    process.wait(10)
    assert Launcher(store).refresh(run.id).state == "finished"


def test_a_reused_pid_is_not_taken_for_the_trainer(tmp_path):
    store = RunStore(tmp_path / "runs")
    run = make_run(store)
    me = psutil.Process()
    store.update(run.id, state="running", pid=me.pid, pid_started=me.create_time() - 50)
    assert Launcher(store).refresh(run.id).state == "failed"
