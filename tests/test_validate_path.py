"""The validation path (backend/validate/path.py), its desk and `python app.py validate`.

One real end-to-end path of rungs 1-3 on the demo model (the CLI as a subprocess: a baseline
run, 2 DDP workers on gloo whose curve must match it step by step, and a fault drill that
SIGKILLs a real torchrun worker, sees the failure, resumes from the last checkpoint and checks
the curve continues), then a deliberately wrong rung 2 (twice the global batch) against the
same baseline run, which must fail with the named cause. Bad input is refused before anything
is made, in the chosen language.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.runs import LOG_FILE, RunStore
from backend.validate.path import RequestError, ValidationRequest, check_request, killed_ranks, parse_rungs
from backend.validate.report import list_reports, load_report, validation_dir
from tests.harness import wait_for
from tests.tiers import starts

ROOT = Path(__file__).resolve().parent.parent

TORCHRUN_FAILURE = """\
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_01:29:50
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 24162)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 24162
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 24161)  (SIGTERM)
"""


def test_the_killed_rank_is_read_from_torchruns_failure_report():
    assert killed_ranks(TORCHRUN_FAILURE) == [1]
    assert killed_ranks(TORCHRUN_FAILURE.replace("-9 (pid", "1 (pid")) == []


# --- bad input: refused before anything is made ------------------------------------------------


@pytest.fixture
def presets():
    from backend.config.presets import load_presets

    return load_presets()[0]


@pytest.mark.parametrize(
    "changes, message_id",
    [
        ({"gpus": 99}, "validate.bad.cpu_processes"),
        ({"gpus": 1}, "validate.bad.gpus_few"),
        ({"preset": "nope"}, "validate.bad.preset"),
        ({"model": "/nonexistent/model"}, "validate.bad.model"),
        ({"dataset_dir": "/tmp", "dataset": "x"}, "validate.bad.dataset"),
        ({"drill_step": 4, "save_steps": 4}, "validate.bad.drill_step"),
        ({"rungs": ("n_gpus",)}, "validate.bad.needs_baseline"),
        ({"base_run": "no-such-run", "rungs": ("n_gpus",)}, "validate.bad.base_run"),
        ({"tolerance": float("nan")}, "validate.bad.tolerance"),
        ({"max_steps": 10**9}, "validate.bad.number"),
    ],
)
def test_bad_requests_are_refused_with_a_message_id(tmp_path, presets, demo_assets, changes, message_id):
    store = RunStore(tmp_path)
    store.ensure_root()
    with pytest.raises(RequestError) as refused:
        check_request(ValidationRequest(**changes), presets, store)
    assert refused.value.message_id == message_id


def test_a_good_request_gets_the_demos_model_and_data(tmp_path, presets, demo_assets):
    checked = check_request(ValidationRequest(rungs=("fault_drill", "one_gpu")), presets, RunStore(tmp_path))
    assert checked.model == str(demo_assets.model_dir) and checked.dataset == demo_assets.dataset_name
    assert checked.rungs == ("one_gpu", "fault_drill")  # always in the path's order
    with pytest.raises(RequestError) as refused:
        parse_rungs("one_gpu,warp")
    assert refused.value.message_id == "validate.bad.rung" and refused.value.params["rung"] == "warp"


def test_the_cli_refuses_bad_input_in_chinese_and_starts_nothing(tmp_path, demo_assets):
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, str(ROOT / "app.py"), "validate", "--gpus", "99", "--lang", "zh-CN", "--runs-dir", str(runs)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "在 CPU 上请求了 99 个进程" in done.stderr
    assert not validation_dir(runs).exists() and RunStore(runs).list() == []
    bad_rung = subprocess.run([sys.executable, str(ROOT / "app.py"), "validate", "--rungs", "one_gpu,warp", "--runs-dir", str(runs)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad_rung.returncode == 2 and "warp is not a rung" in bad_rung.stderr


# --- the real path on the demo ---------------------------------------------------------------


@pytest.fixture(scope="module")
def path_run(tmp_path_factory, demo_assets, starts_trainer, starts_lf_helper):
    """`python app.py validate` with its defaults: rungs 1-3 on the demo, 2 CPU processes."""
    runs = tmp_path_factory.mktemp("validate") / "runs"
    began = time.monotonic()
    done = subprocess.run([sys.executable, str(ROOT / "app.py"), "validate", "--runs-dir", str(runs)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    return done, runs, time.monotonic() - began


def test_rungs_one_to_three_pass_on_the_demo_with_real_figures(path_run):
    done, runs, wall = path_run
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    [report] = [r for r in list_reports(runs) if len(r.rungs) == 3]
    assert f"Report: {validation_dir(runs) / (report.id + '.json')}" in done.stdout
    one, many, drill = report.rungs
    assert [r.rung for r in report.rungs] == ["one_gpu", "n_gpus", "fault_drill"]
    assert [r.status for r in report.rungs] == ["pass", "pass", "pass"], [r.causes for r in report.rungs]
    assert report.data_fingerprint is not None and report.data_fingerprint.startswith("sha256:")  # LLaMA-Factory's tokenized examples
    assert report.machine["preset"] == "cpu-demo" and "torch" in report.machine
    store = RunStore(runs)
    for rung in report.rungs:
        [run_id] = rung.run_ids
        assert store.read(run_id).state == "finished"  # a real run in the runs folder
    # Rung 1: the baseline's curve, throughput, and no VRAM on the CPU.
    assert [step for step, _ in one.curve] == list(range(1, 25))
    assert one.figures["tokens_per_s"] > 0 and one.figures["steps_per_s"] > 0
    assert one.figures["vram_peak_mib_per_gpu"] == "-" and one.figures["global_batch"] == 4
    # Rung 2: two DDP workers, the same global batch, the same curve step by step.
    log = (store.run_dir(many.run_ids[0]) / LOG_FILE).read_text(errors="replace")
    assert "Process rank: 1, world size: 2" in log
    assert many.figures["global_batch"] == many.figures["baseline_global_batch"] == 4
    assert many.figures["steps_compared"] == 24
    assert many.figures["max_loss_gap"] <= 1e-4  # measured: ~2e-7 (float sums in another order)
    assert 0 < many.figures["scaling_efficiency"] <= 1.5
    # Rung 3: a real worker killed after the drill step, seen, named, resumed, continuous.
    assert drill.figures["killed_rank"] == "1" and drill.figures["failure_named"] != "-"
    assert drill.figures["killed_at_step"] >= 10 and drill.figures["processes_left"] == 0
    assert drill.figures["resumed_from_step"] == 6  # the last checkpoint before the kill
    assert drill.figures["retrained_steps"] >= 1 and drill.figures["max_resume_jump"] <= 1e-4
    assert drill.figures["max_loss_gap"] <= 1e-4  # the drill's whole curve is rung 2's
    assert store.read(drill.run_ids[0]).attempts == 2
    assert [step for step, _ in drill.curve] == list(range(1, 25))
    for rung in report.rungs:
        assert rung.figures["rocboard_overhead_s"] >= 0 and rung.figures["rung_wall_s"] > 0
    print(f"\nvalidation path rungs 1-3: {wall:.0f} s; overhead per rung: {[r.figures['rocboard_overhead_s'] for r in report.rungs]}")


def test_a_different_global_batch_fails_rung_2_with_the_named_cause(path_run):
    from backend.service import RocBoard
    from backend.service.validation_desk import ValidationDesk

    _, runs, _ = path_run
    [earlier] = [r for r in list_reports(runs) if len(r.rungs) == 3]
    baseline = earlier.rungs[0].run_ids[0]
    board = RocBoard(runs)
    desk = ValidationDesk(board, lambda: board.presets, board.active_run, fingerprint=lambda preset: {}, data_fingerprint=lambda run_dirs: None)
    try:
        path_id = desk.start(ValidationRequest(rungs=("n_gpus",), base_run=baseline, n_gpus_batch=2))
        status = desk.wait(path_id, timeout=600)
        assert status.done
        [rung] = desk.report(path_id).rungs
    finally:
        board.close()
    assert rung.status == "fail"
    assert rung.figures["global_batch"] == 8 and rung.figures["baseline_global_batch"] == 4
    ids = [note.message_id for note in rung.causes]
    assert ids == ["validate.cause.curve_mismatch", "validate.cause.global_batch"]
    assert rung.causes[1].params == {"one": 4, "many": 8, "processes": 2}
    assert rung.figures["first_step_beyond"] >= 1 and rung.figures["max_loss_gap"] > 0.02


@starts("trainer", "lf_helper")
def test_a_path_stopped_at_rung_1_stops_its_run_and_says_so(tmp_path, demo_assets):
    import psutil

    from backend.service import RocBoard
    from backend.service.validation_desk import ValidationDesk

    board = RocBoard(tmp_path / "runs")
    desk = ValidationDesk(board, lambda: board.presets, board.active_run, fingerprint=lambda preset: {"preset": "cpu-demo"})
    try:
        path_id = desk.start(ValidationRequest())
        with pytest.raises(RequestError) as refused:  # one path at a time
            desk.start(ValidationRequest())
        assert refused.value.message_id == "validate.bad.path_running"
        run_id = wait_for(lambda: (status := desk.status(path_id)).run_id and board.store.read(status.run_id).pid and status.run_id, timeout=120)
        assert run_id and desk.running() == path_id
        trainer = psutil.Process(board.store.read(run_id).pid)
        tree = [trainer, *trainer.children(recursive=True)]
        desk.stop(path_id)
        status = desk.wait(path_id, timeout=60)
    finally:
        board.close()
    assert status.done and status.rungs == {"one_gpu": "stopped", "n_gpus": "skipped", "fault_drill": "skipped"}
    assert status.progress.message_id == "validate.progress.stopped"
    report = load_report(board.runs_dir, path_id)  # saved, whole, saying so
    assert [(r.rung, r.status) for r in report.rungs] == [("one_gpu", "stopped"), ("n_gpus", "skipped"), ("fault_drill", "skipped")]
    assert report.rungs[0].run_ids == (run_id,) and report.machine == {"preset": "cpu-demo"}
    assert board.store.read(run_id).state == "stopped"
    assert [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []


def test_vram_peaks_per_gpu_come_from_the_samplers_own_file_and_an_imbalance_is_named(tmp_path):
    """The sampler (on the project's simulated AMD sysfs) writes the run's samples; the path
    reads each GPU's peak from them, and rung 2's imbalance figure from the peaks."""
    from backend.runs import SAMPLES_FILE
    from backend.telemetry.fake_sysfs import build_fake_sysfs, server_cards, set_vram_used
    from backend.telemetry.sampler import Sampler
    from backend.telemetry.sysfs import SysfsSource
    from backend.validate.path import _imbalance, vram_peaks

    store = RunStore(tmp_path / "runs")
    store.ensure_root()
    run_id = store.create(name="gpus", preset="mi300x", model="m", files={LOG_FILE: ""}).id
    root = build_fake_sysfs(tmp_path / "sys", server_cards(2))  # card N is HIP device N
    sampler = Sampler([SysfsSource(root, env={})], interval_s=0.05)
    samples = store.run_dir(run_id) / SAMPLES_FILE
    sampler.watch(samples, pid=None)
    try:
        for card, used in ((0, 6 * 2**30), (1, 2 * 2**30)):
            set_vram_used(root, card, used)
        sampler.tick()
        set_vram_used(root, 0, 3 * 2**30)  # the peak stays
        sampler.tick()
    finally:
        sampler.stop()
    peaks = vram_peaks(store, run_id)
    assert peaks == "0:6144,1:2048"
    assert _imbalance(peaks) == pytest.approx(2 / 3, abs=1e-3)
    assert vram_peaks(store, store.create(name="cpu", preset="cpu-demo", model="m", files={LOG_FILE: ""}).id) == ""


def test_the_nodes_rung_needs_a_slurm_cluster_set_up_here(tmp_path, presets, demo_assets):
    store = RunStore(tmp_path)
    with pytest.raises(RequestError) as refused:
        check_request(ValidationRequest(rungs=("one_gpu", "nodes")), presets, store, slurm=lambda: False)
    assert refused.value.message_id == "validate.bad.no_slurm"
    with pytest.raises(RequestError) as refused:
        check_request(ValidationRequest(rungs=("one_gpu", "nodes"), nodes=1), presets, store, slurm=lambda: True)
    assert refused.value.message_id == "validate.bad.number" and refused.value.params["name"] == "nodes"
    with pytest.raises(RequestError) as refused:  # rung 1's batch of 2 over 3 nodes
        check_request(ValidationRequest(rungs=("one_gpu", "nodes"), nodes=3), presets, store, slurm=lambda: True)
    assert refused.value.message_id == "validate.bad.nodes_batch"
    assert check_request(ValidationRequest(rungs=("one_gpu", "nodes")), presets, store, slurm=lambda: True).rungs == ("one_gpu", "nodes")


def test_the_nodes_rung_matches_the_baseline_across_two_slurm_nodes(path_run, slurm_cluster):
    """Rung 4 on the tests' own two-node Slurm cluster: one process on each node, the same
    global batch as the path's one-GPU run (reused as the baseline), the same curve."""
    from backend.service import RocBoard
    from backend.service.validation_desk import ValidationDesk

    _, runs, _ = path_run
    [earlier] = [r for r in list_reports(runs) if len(r.rungs) == 3]
    baseline = earlier.rungs[0].run_ids[0]
    board = RocBoard(runs)
    desk = ValidationDesk(board, lambda: board.presets, board.active_run, fingerprint=lambda preset: {}, slurm=board.run_manager.slurm.client.configured, data_fingerprint=lambda run_dirs: None)
    try:
        path_id = desk.start(ValidationRequest(rungs=("nodes",), base_run=baseline))
        assert desk.wait(path_id, timeout=600).done
        [rung] = desk.report(path_id).rungs
    finally:
        board.close()
    assert rung.status == "pass", rung.causes
    state = board.store.read(rung.run_ids[0])
    assert state.executor == "slurm" and state.slurm_nodes == "n[1-2]" and state.state == "finished"
    assert rung.figures["global_batch"] == rung.figures["baseline_global_batch"] == 4 and rung.figures["processes"] == 2
    assert rung.figures["steps_compared"] == 24 and rung.figures["max_loss_gap"] <= 1e-4
