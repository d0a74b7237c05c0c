"""`app.py submit` places its run on the node as the app does (issue 30 §1): on a simulated
2-GPU sysfs, with a run of "the app" holding GPU 0, a `submit` from another process starts its
run on GPU 1 (read from that trainer's /proc/<pid>/environ and its launch.json); while an app
keeps the queue, `submit` only queues the run with its ask, and the app's keeper starts it on
the GPU that frees up.

The trainers are stand-ins (a process that sleeps, started through the real launcher, in this
process and in the `submit` process alike); the check of the YAML is the real one (it starts
LLaMA-Factory's check worker: slow tier)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.runs.gpu_slots import node_gpus
from backend.runs.queue import RunQueue, read_launch_gpus
from backend.service import RocBoard
from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards
from tests.harness import ROOT, wait_until
from tests.test_gpu_slots_queue import STAND_IN, environ, queue_run
from tests.tiers import starts

# `python app.py submit`, its trainer a stand-in (the launcher itself is the real one).
SUBMIT = f"""
import sys
from backend.runs.launcher import Launcher
real_start = Launcher.start
Launcher.start = lambda self, run_id, env, command=None: real_start(self, run_id, env, command={STAND_IN!r})
from backend.runs_cli import submit_main
sys.exit(submit_main(sys.argv[1:]))
"""


def submit(config: Path, runs: Path, sysfs: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", SUBMIT, str(config), "--runs-dir", str(runs), "--sysfs-root", str(sysfs)]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(600)
@starts("lf_helper")
def test_submit_from_another_process_lands_on_a_free_gpu_or_is_left_to_the_keeping_app(runs, tmp_path, monkeypatch, demo_assets):
    sysfs = build_fake_sysfs(tmp_path / "sys", server_cards(2), bmc_vga=False)
    board = RocBoard(runs)
    rm = board.run_manager
    rm.set_node(node_gpus(sysfs))
    assert rm.node == (0, 1)
    real_start = rm.launcher.start
    monkeypatch.setattr(rm.launcher, "start", lambda run_id, env, command=None: real_start(run_id, env, command=STAND_IN))
    store = rm.store
    app_run = queue_run(store, "app-run", 1)
    assert rm.advance_queue().id == app_run and rm.gpus_of(app_run) == (0,)

    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump({
        "model_name_or_path": str(demo_assets.model_dir), "template": "llama3", "dataset_dir": str(demo_assets.dataset_dir), "dataset": "demo",
        "stage": "sft", "do_train": True, "finetuning_type": "lora", "cutoff_len": 32, "max_steps": 5, "run_name": "submitted",
    }))  # fmt: skip
    # No app keeps the queue: `submit` places the run itself, on the GPU nobody holds.
    done = submit(config, runs, sysfs)
    assert done.returncode == 0, done.stderr
    submitted = done.stdout.strip()
    assert "started:" in done.stderr and "GPUs 1" in done.stderr, done.stderr
    assert read_launch_gpus(runs / submitted) == (1, (1,))
    env = environ(store.read(submitted).pid)
    assert env["HIP_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == "1"
    assert environ(store.read(app_run).pid)["HIP_VISIBLE_DEVICES"] == "0"
    view = rm.node_view()  # the app counts it on GPU 1 only, not as holding the whole node
    assert (view.holder(0), view.holder(1)) == (app_run, submitted)

    # An app keeps the queue: `submit` only queues the run, with its ask; when GPU 0 frees,
    # the app's keeper starts it there (in the app's process: its child).
    rm.keep_queue(interval_s=0.5)
    try:
        done = submit(config, runs, sysfs)
        assert done.returncode == 0, done.stderr
        later = done.stdout.strip()
        assert "queued: number 1" in done.stderr and "app keeping this runs directory starts it" in done.stderr, done.stderr
        assert store.read(later).state == "queued" and read_launch_gpus(runs / later) == (1, None)
        rm.stop(app_run)
        wait_until(lambda: store.read(later).state == "running", 30, interval=0.2, what="the app's keeper to start the submitted run")
        assert rm.gpus_of(later) == (0,) and environ(store.read(later).pid)["HIP_VISIBLE_DEVICES"] == "0"
        assert RunQueue(store).queued() == []
    finally:
        rm.stop_keeping_queue()
