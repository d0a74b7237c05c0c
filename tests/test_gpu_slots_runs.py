"""Runs side by side on a simulated 2-GPU AMD node (issue 30 §1), with real trainers.

The node is what the app sees: a fake sysfs tree of two GPUs (backend/telemetry/fake_sysfs.py),
read by gpu_slots.node_gpus as ui/serve.py reads /sys. The trainers are the real
llamafactory-cli on the demo model, on the CPU: the demo preset trains on the CPU whatever
HIP_VISIBLE_DEVICES says, so the variables a run gets are recorded (in its process's
environment and its launch.json) and read back here, not obeyed by a GPU.

The app is a small driver process composed as ui/serve.py composes the app (sampler on the
tree, RocBoard, set_node, reattach, keep_queue) without the page, so that `kill -9` of it and
a restart cost seconds, not a Gradio import each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from backend.runs import RunStore
from backend.runs.queue import RunQueue, read_launch_gpus
from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards, set_vram_used
from tests.harness import ROOT, wait_until
from tests.tiers import starts

DRIVER = """
import sys, time
from pathlib import Path
from backend.runs.gpu_slots import node_gpus
from backend.service import RocBoard, demo_form
from backend.telemetry.sampler import Sampler

runs, sysfs, mode = sys.argv[1:4]
sampler = Sampler(interval_s=1.0, sysfs_root=Path(sysfs))
sampler.start()
board = RocBoard(Path(runs), sampler=sampler)
board.set_node(node_gpus(Path(sysfs)))
print("node", board.run_manager.node, flush=True)
active = board.reattach()
print("reattached", active.id if active else None, flush=True)
board.run_manager.keep_queue(interval_s=0.5)
if mode == "start":
    long = {"max_steps": 100000, "save_steps": 100000, "cutoff_len": 32}
    for name, extra in (("a", long), ("b", long), ("third", long)):  # one form: one LLaMA-Factory check
        result = board.start({**demo_form(), **extra, "run_name": name}, intent=name)
        print("started", name, result.run.id if result.run else None, result.run.state if result.run else result.findings, flush=True)
print("ready", flush=True)
time.sleep(900)
"""


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


def said(log: Path, app: subprocess.Popen, what: str, times: int = 1) -> bool:
    text = log.read_text() if log.exists() else ""
    if app.poll() is not None:
        raise AssertionError(f"the driver ended ({app.returncode}): {text[-3000:]}")
    return text.count(what) >= times


def driver(runs: Path, sysfs: Path, mode: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(runs), str(sysfs), mode],
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@pytest.mark.timeout(600)
@starts("trainer")
def test_three_one_gpu_runs_on_two_gpus_run_two_at_once_survive_kill_9_of_the_app_and_the_third_follows(tmp_path, demo_assets):
    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(2), bmc_vga=False)
    used = {0: 3 * 2**30, 1: 7 * 2**30}  # card N is HIP device N: each GPU's VRAM tells them apart
    for card, value in used.items():
        set_vram_used(sysfs, card, value)
    runs = tmp_path / "runs"
    log = tmp_path / "driver.log"
    store = RunStore(runs)
    app = driver(runs, sysfs, "start", log)
    try:
        wait_until(lambda: said(log, app, "ready"), 240, interval=0.5, what="the driver's starts")
        ids = {line.split()[1]: line.split()[2] for line in log.read_text().splitlines() if line.startswith("started ")}
        assert "node (0, 1)" in log.read_text()
        a, b, third = ids["a"], ids["b"], ids["third"]
        wait_until(lambda: all(store.read(i).state == "running" for i in (a, b)), 120, interval=0.5, what="a and b training")
        assert store.read(third).state == "queued"  # both GPUs are held: it waits
        seen = {}
        for run_id in (a, b):
            state = store.read(run_id)
            env = environ(state.pid)
            seen[run_id] = env
            assert env["HIP_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"]
            assert "ROCR_VISIBLE_DEVICES" not in env  # never set: docs/multi-gpu.md
            assert read_launch_gpus(runs / run_id) == (1, (int(env["HIP_VISIBLE_DEVICES"]),))
        assert {seen[a]["HIP_VISIBLE_DEVICES"], seen[b]["HIP_VISIBLE_DEVICES"]} == {"0", "1"}
        # (one process each: no torchrun, no MASTER_PORT; test_gpu_slots_queue checks the ports)

        # each run's chart shows only its GPU: the app's sampler follows one, the other has its own
        def gpu_readings(run_id: str) -> list[dict]:
            path = runs / run_id / "samples.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            return [r for r in map(json.loads, lines) if r.get("source") == "sysfs"]

        wait_until(lambda: all(gpu_readings(i) for i in (a, b)), 60, interval=0.5, what="GPU samples of a and b")
        for run_id in (a, b):
            readings = gpu_readings(run_id)
            assert {r["gpu"] for r in readings} == {0}  # one GPU, numbered as the run numbers it
            assert {r["used_bytes"] for r in readings} == {used[int(seen[run_id]["HIP_VISIBLE_DEVICES"])]}

        # kill -9 of the app: the trainers train on; a new app knows which GPUs they hold
        os.kill(app.pid, signal.SIGKILL)
        app.wait(10)
        assert store.read(a).state == store.read(b).state == "running"
        app = driver(runs, sysfs, "restart", log)
        wait_until(lambda: said(log, app, "ready", 2), 120, interval=0.5, what="the restarted driver")
        assert store.read(third).state == "queued" and [s.id for s in RunQueue(store).queued()] == [third]

        # b is stopped (as `app.py stop` does, from another process): the third starts on b's
        # GPU, never a's
        from backend.service import RocBoard

        assert RocBoard(runs).stop(b).state == "stopped"
        wait_until(lambda: store.read(third).state == "running", 60, interval=0.5, what="the third to start")
        assert read_launch_gpus(runs / third)[1] == (int(seen[b]["HIP_VISIBLE_DEVICES"]),)
        assert environ(store.read(third).pid)["HIP_VISIBLE_DEVICES"] == seen[b]["HIP_VISIBLE_DEVICES"]
        assert store.read(a).state == "running"
        assert json.loads((runs / "queue.json").read_text()) == []
    finally:
        os.kill(app.pid, signal.SIGKILL)
        app.wait(10)
        from backend.runs.launcher import ProcessIdentity, stop_tree

        for state in store.list():
            if state.pid and state.pid_started and state.active:
                stop_tree(ProcessIdentity(state.pid, state.pid_started, state.pid_start_key), graceful_s=0)
