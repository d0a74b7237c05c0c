"""Slurm runs against a real Slurm (tests/slurm_cluster.py: slurmctld, two slurmd on this
machine, accounting): the real sbatch, squeue, scontrol, scancel and sacct, the real
llamafactory-cli on the demo model, nothing stood in for.

- a one-node run: pending, running, stopped (LLaMA-Factory saves), resumed as a new job
  from its checkpoint, finished;
- a two-node job under torchrun (NNODES=2, the master found with scontrol show hostnames),
  each node charting its own memory, stopped with nothing left on either node;
- a job that waits for busy CPUs stays PENDING and the page says why, in both languages;
- what no node has, a bad partition, a bad account, a time limit above the partition's:
  refused before anything is made, or removed again when sbatch refuses;
- a job killed by its time limit is TIMEOUT, with the fix;
- the web server killed with kill -9 and restarted re-attaches to the running job, and the
  command line submits, lists and stops it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from backend.runs import RunStore
from backend.service import RocBoard, demo_form
from backend.slurm.client import SlurmClient
from backend.slurm.executor import JobWatch
from backend.slurm.script import NODE_TASK_MARK
from tests.harness import PYTHON, ROOT, AppServer, http_get, wait_until
from tests.slurm_cluster import ACCOUNT, NODE_CPUS, PARTITION, SHORT_PARTITION

pytestmark = pytest.mark.slow

SLURM = {"run_on": "slurm"}
TRAIN_TIMEOUT_S = 240


def rules(findings):
    return {f.rule for f in findings}


@pytest.fixture
def board(slurm_cluster, tmp_path):
    board = RocBoard(tmp_path / "runs")
    yield board
    for state in board.run_manager.live_runs():
        if state.job_id:
            slurm_cluster.run("scancel", state.job_id)


def wait_state(board: RocBoard, run_id: str, predicate, what: str, timeout: float = TRAIN_TIMEOUT_S):
    return wait_until(lambda: (lambda s: s if predicate(s) else None)(board.run_manager.refresh(run_id)), timeout, interval=0.5, what=what)


def wait_points(board: RocBoard, run_id: str, count: int, timeout: float = TRAIN_TIMEOUT_S):
    return wait_until(lambda: len(board.snapshot(run_id).points) >= count, timeout, interval=0.5, what=f"{count} loss points")


def processes_of(run_dir: Path) -> list[psutil.Process]:
    """Every process working in the run directory, or naming it (node tasks, trainers, workers)."""
    found = []
    for process in psutil.process_iter(["cmdline", "cwd"]):
        try:
            cwd = process.info["cwd"] or ""
            cmdline = " ".join(process.info["cmdline"] or [])
        except (psutil.Error, OSError):
            continue
        if cwd.startswith(str(run_dir)) or str(run_dir) in cmdline:
            found.append(process)
    return found


def slurmstepd_of(job_id: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if any(f"[{job_id}." in part for part in (p.info["cmdline"] or []))]


# --- one node: submit, watch, stop, resume ----------------------------------------------------


def test_a_one_node_run_waits_runs_stops_and_resumes_as_a_new_job(board, slurm_cluster):
    # Long enough that Stop lands while it trains: the demo does up to ~65 steps a second here,
    # and the stop is seen, sent and relayed within a second or two of the 25th point.
    form = {**demo_form(), **SLURM, "run_name": "one-node", "max_steps": 600, "save_steps": 20}
    result = board.start(form)
    assert result.started, [(f.rule, f.problem) for f in result.findings]
    run = result.run
    assert run.executor == "slurm" and run.state == "pending" and run.job_id.isdigit()
    run_dir = board.store.run_dir(run.id)
    assert (run_dir / "slurm.sh").read_text().startswith("#!/bin/bash")
    first_job = run.job_id
    wait_state(board, run.id, lambda s: s.state == "running", "the job to run")
    wait_points(board, run.id, 25)
    snapshot = board.snapshot(run.id)
    assert any(series.label.startswith("n") and "·" in series.label for series in snapshot.memory)  # the node's own sampler
    assert "Slurm job" in board.run_view(run.id).status

    board.stop(run.id)
    stopped = wait_state(board, run.id, lambda s: not s.active, "the stopped job to end", 60)
    assert stopped.state == "stopped" and stopped.stop_reason == "reason.stopped_by_user"
    task = json.loads((run_dir / "nodes" / "0" / "task.json").read_text())
    last_step = max(p.step for p in board.snapshot(run.id).points)
    assert task["stopped"] is True and task["exit_code"] == 0, (task, last_step)  # LLaMA-Factory's stop-and-save, not a kill
    assert last_step < 600  # stopped while it trained
    assert (run_dir / "output" / "adapter_model.safetensors").is_file()
    assert processes_of(run_dir) == []

    # A resume the cluster would refuse (form.json edited to a partition it lacks) changes nothing.
    form_file = run_dir / "form.json"
    saved = form_file.read_text()
    form_file.write_text(json.dumps({**json.loads(saved), "slurm_partition": "nope"}))
    refused = board.resume(run.id)
    assert not refused.started and "slurm-bad-partition" in rules(refused.findings)
    assert board.store.read(run.id).attempts == 1 and not (run_dir / "attempts").exists()
    form_file.write_text(saved)

    resumed = board.resume(run.id)
    assert resumed.started, [(f.rule, f.problem) for f in resumed.findings]
    checkpoint = int(resumed.run.resumed_from.removeprefix("output/checkpoint-"))
    assert resumed.run.job_id != first_job and checkpoint % 20 == 0 and 20 <= checkpoint < 600
    finished = wait_state(board, run.id, lambda s: not s.active, "the resumed job to finish")
    assert finished.state == "finished" and finished.attempts == 2 and finished.slurm_state == "COMPLETED"
    steps = sorted({p.step for p in board.snapshot(run.id).points})
    assert steps == list(range(1, 601))
    assert (run_dir / f"slurm-{first_job}.log").is_file() and (run_dir / f"slurm-{finished.job_id}.log").is_file()
    assert (run_dir / "attempts" / "1" / "state.json").is_file()  # the first job's state, archived


# --- two nodes under torchrun -----------------------------------------------------------------


def test_a_two_node_job_trains_under_torchrun_and_stops_with_nothing_left(board, slurm_cluster):
    form = {**demo_form(), **SLURM, "run_name": "two-nodes", "slurm_nodes": 2, "max_steps": 5000, "save_steps": 5000}
    result = board.start(form)
    assert result.started, [(f.rule, f.problem) for f in result.findings]
    run_id = result.run.id
    run_dir = board.store.run_dir(run_id)
    launch = json.loads((run_dir / "launch.json").read_text())["env"]
    assert launch["NNODES"] == "2" and launch["FORCE_TORCHRUN"] == "1" and "MASTER_ADDR" not in launch
    running = wait_state(board, run_id, lambda s: s.state == "running", "the job to run")
    assert running.slurm_nodes == "n[1-2]"
    wait_points(board, run_id, 10)
    # Each node's trainer joined the one world of two.
    node0, node1 = (run_dir / "train.log").read_text(), (run_dir / "nodes" / "1" / "train.log").read_text()
    assert "num nodes: 2, node rank: 0" in node0 and "num nodes: 2, node rank: 1" in node1
    assert "world size: 2" in node0 and "world size: 2" in node1
    batch_log = (run_dir / f"slurm-{running.job_id}.log").read_text()
    assert f"master n1 (127.0.0.1:{29500 + int(running.job_id) % 10000})" in batch_log  # scontrol show hostnames, then its NodeAddr
    # Every node's memory on the one chart, labelled by node.
    wait_until(lambda: {s.label.split(" · ")[0] for s in board.snapshot(run_id).memory} >= {"n1", "n2"}, 30, what="both nodes' samples")
    before = processes_of(run_dir)
    node_tasks = [p for p in before if p.is_running() and len(p.cmdline()) > 1 and p.cmdline()[1].endswith(NODE_TASK_MARK)]
    assert len(node_tasks) == 2  # one a node (srun itself names it too)

    started = time.monotonic()
    board.stop(run_id)
    stopped = wait_state(board, run_id, lambda s: not s.active, "the two-node job to stop", 60)
    assert stopped.state == "stopped" and time.monotonic() - started < 40
    tasks = [json.loads((run_dir / "nodes" / rank / "task.json").read_text()) for rank in ("0", "1")]
    assert [task["node"] for task in tasks] == ["n1", "n2"] and all(task["stopped"] for task in tasks)
    wait_until(lambda: processes_of(run_dir) == [] and slurmstepd_of(stopped.job_id) == [], 30, what="0 processes on either node")
    left = [p for p in before if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], [(p.pid, p.status(), p.cmdline()) for p in left]


# --- waiting, and what is refused ----------------------------------------------------------------


def test_a_job_waiting_for_busy_cpus_stays_pending_and_the_page_says_why(board, slurm_cluster, tmp_path):
    blocker = tmp_path / "blocker.sh"
    blocker.write_text("#!/bin/bash\nsleep 600\n")
    done = slurm_cluster.run("sbatch", "--parsable", "--nodes=2", f"--cpus-per-task={NODE_CPUS}", f"--output={tmp_path}/%j.out", str(blocker))
    assert done.returncode == 0, done.stderr
    blocker_job = done.stdout.strip()
    try:
        wait_until(lambda: "RUNNING" in slurm_cluster.run("squeue", "--noheader", f"--jobs={blocker_job}", "--format=%T").stdout, 30, what="the blocking job to run")
        result = board.start({**demo_form(), **SLURM, "run_name": "waits", "slurm_cpus_per_task": NODE_CPUS})
        assert result.started and result.run.state == "pending", [(f.rule, f.problem) for f in result.findings]
        run_id = result.run.id
        waiting = wait_state(board, run_id, lambda s: s.slurm_reason == "Resources", "Slurm to say why it waits", 30)
        assert waiting.state == "pending" and waiting.active
        time.sleep(3)
        assert board.run_manager.refresh(run_id).state == "pending"  # it stays
        english, chinese = board.run_view(run_id, "en").status, board.run_view(run_id, "zh-CN").status
        assert "the nodes it needs are busy with other jobs" in english and f"`{waiting.job_id}`" in english
        assert "它需要的节点正被其他作业占用" in chinese
        assert "Resources" not in english  # Slurm's word, in the user's words
        queue = board.queue_markdown("en")
        assert run_id in queue and "busy with other jobs" in queue
        # Stop while it waits: cancelled, nothing ever ran.
        board.stop(run_id)
        ended = wait_state(board, run_id, lambda s: not s.active, "the waiting job to be cancelled", 30)
        assert ended.state == "stopped" and ended.slurm_state == "CANCELLED" and ended.started_at is None
        assert not (board.store.run_dir(run_id) / "nodes").exists()
    finally:
        slurm_cluster.run("scancel", blocker_job)


@pytest.mark.hostile
@pytest.mark.parametrize(
    "changes, rule, key",
    [
        ({"slurm_cpus_per_task": 64}, "slurm-too-many-cpus", "slurm_cpus_per_task"),
        ({"slurm_nodes": 3}, "slurm-too-many-nodes", "slurm_nodes"),
        ({"slurm_gpus_per_node": 8}, "slurm-too-many-gpus", "slurm_gpus_per_node"),
        ({"slurm_mem": "64G"}, "slurm-too-much-memory-node", "slurm_mem"),
        ({"slurm_partition": SHORT_PARTITION, "slurm_time": "00:05:00"}, "slurm-time-over-partition", "slurm_time"),
        ({"slurm_partition": "nope"}, "slurm-bad-partition", "slurm_partition"),
    ],
)
def test_what_the_cluster_cannot_give_is_refused_before_anything_is_made(board, changes, rule, key):
    result = board.start({**demo_form(), **SLURM, "run_name": "refused", **changes})
    assert not result.started
    finding = next(f for f in result.findings if f.rule == rule)
    assert finding.key == key and finding.severity == "problem" and finding.fix
    if rule == "slurm-bad-partition":
        assert f"{PARTITION}, {SHORT_PARTITION}" in finding.fix
    elif rule != "slurm-time-over-partition" or True:
        assert finding.patch or rule == "slurm-bad-partition"
    assert list(board.store.root.iterdir()) == []  # no run, no staging folder


@pytest.mark.hostile
def test_a_bad_account_is_refused_by_slurm_with_nothing_left_behind(board, slurm_cluster, monkeypatch):
    if not slurm_cluster.accounting:
        pytest.skip("SLURM ACCOUNTING TESTS SKIPPED: the test cluster has no accounting (install slurmdbd and mariadb-server)")
    form = {**demo_form(), **SLURM, "run_name": "bad-account", "slurm_account": "nope"}
    result = board.start(form)  # sbatch --test-only says no
    assert not result.started and "slurm-bad-account" in rules(result.findings)
    assert "Invalid account" in next(f for f in result.findings if f.rule == "slurm-bad-account").problem
    assert list(board.store.root.iterdir()) == []
    # When only the real submission says no (the preflight passed), the run made for it goes again.
    monkeypatch.setattr(board.run_manager.slurm.client, "test_only", lambda script, cwd: (None, None))
    result = board.start(form)
    assert not result.started and "slurm-bad-account" in rules(result.findings)
    assert list(board.store.root.iterdir()) == []
    # The account root belongs to is taken.
    good = board.start({**form, "slurm_account": ACCOUNT, "max_steps": 10})
    assert good.started, [(f.rule, f.problem) for f in good.findings]
    wait_state(board, good.run.id, lambda s: not s.active, "the run with a good account")


def test_sacct_tells_the_end_of_a_job_squeue_has_forgotten(board, slurm_cluster):
    if not slurm_cluster.accounting:
        pytest.skip("SLURM ACCOUNTING TESTS SKIPPED: the test cluster has no accounting (install slurmdbd and mariadb-server)")
    result = board.start({**demo_form(), **SLURM, "run_name": "accounted", "max_steps": 5})
    job_id = result.run.job_id
    wait_state(board, result.run.id, lambda s: not s.active, "the short job to finish")

    class Forgetful(SlurmClient):
        """squeue and scontrol as they answer once MinJobAge has passed."""

        def jobs(self, job_ids):
            return {}, None

        def job(self, job_id):
            return None, None

    seen = JobWatch(Forgetful()).poll([job_id])[job_id]
    assert (seen.state, seen.exit_code) == ("COMPLETED", 0)  # from sacct


# --- the time limit -------------------------------------------------------------------------------


def test_a_job_killed_by_its_time_limit_is_timeout_with_the_fix(board, slurm_cluster):
    form = {**demo_form(), **SLURM, "run_name": "time-limit", "slurm_partition": SHORT_PARTITION, "slurm_time": "00:01:00", "max_steps": 100_000, "save_steps": 50}
    result = board.start(form)
    assert result.started, [(f.rule, f.problem) for f in result.findings]
    run_id = result.run.id
    ended = wait_state(board, run_id, lambda s: not s.active, "Slurm's time limit to end the job", 200)
    assert (ended.state, ended.slurm_state, ended.stop_reason) == ("failed", "TIMEOUT", "reason.slurm_timeout")
    assert ended.exit_code == -15  # SIGTERM at the limit (Slurm's ExitCode=0:15)
    english = board.run_view(run_id, "en")
    shown = english.status.replace("\\", "")  # the page's Markdown escapes
    assert "Slurm ended the job at its time limit (00:01:00) before training finished" in shown
    assert "Press Resume: a new job goes on from `checkpoint-" in shown and "Ask for more time" in shown
    assert english.resumable
    assert "时间上限" in board.run_view(run_id, "zh-CN").status
    wait_until(lambda: processes_of(board.store.run_dir(run_id)) == [], 30, what="nothing left of the timed-out job")


def test_a_job_told_its_time_limit_is_near_stops_and_saves_before_it(board, slurm_cluster, monkeypatch):
    """--signal=USR1@...: the node tasks stop the trainer as Stop does, before Slurm kills it.
    (Written for limits of 20 minutes and more, 3 minutes ahead; here 2 and 1.5.)"""
    from backend.slurm import script

    monkeypatch.setattr(script, "PRE_TIMEOUT_MIN_S", 120)
    monkeypatch.setattr(script, "PRE_TIMEOUT_S", 90)
    form = {**demo_form(), **SLURM, "run_name": "near-limit", "slurm_time": "00:02:00", "max_steps": 100_000, "save_steps": 50}
    result = board.start(form)
    assert result.started, [(f.rule, f.problem) for f in result.findings]
    run_dir = board.store.run_dir(result.run.id)
    assert "#SBATCH --signal=USR1@90" in (run_dir / "slurm.sh").read_text()
    ended = wait_state(board, result.run.id, lambda s: not s.active, "the warning before the time limit", 200)
    assert (ended.state, ended.stop_reason, ended.slurm_state) == ("stopped", "reason.slurm_saved_before_limit", "COMPLETED")
    assert json.loads((run_dir / "nodes" / "0" / "task.json").read_text())["stopped"] is True
    assert (run_dir / "output" / "adapter_model.safetensors").is_file()  # saved, not killed
    assert "before its Slurm time limit" in board.run_view(result.run.id).status


# --- restart and the command line ------------------------------------------------------------------


def cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, str(ROOT / "app.py"), *argv], cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=180)


def demo_yaml(path: Path, **changes) -> Path:
    from backend.demo import build_demo

    assets = build_demo()
    config = {
        "model_name_or_path": str(assets.model_dir), "template": "llama3", "dataset_dir": str(assets.dataset_dir), "dataset": "demo",
        "stage": "sft", "do_train": True, "finetuning_type": "lora", "cutoff_len": 128, "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": 1, "learning_rate": 0.01, "max_steps": 100, "logging_steps": 1, "save_steps": 50, **changes,
    }  # fmt: skip
    import yaml

    path.write_text(yaml.safe_dump(config))
    return path


def test_the_app_killed_with_kill_9_and_restarted_reattaches_to_its_running_job(slurm_cluster, tmp_path, demo_assets):
    workdir = tmp_path / "app"
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    with AppServer(workdir=workdir, env=env) as server:
        submitted = cli("submit", str(demo_yaml(tmp_path / "long.yaml", max_steps=100_000, save_steps=100_000, run_name="reattach")), "--slurm", "--runs-dir", str(server.runs_dir), env=env)
        assert submitted.returncode == 0, submitted.stderr
        run_id = submitted.stdout.strip()
        assert "submitted: Slurm job" in submitted.stderr
        store = RunStore(server.runs_dir)
        # The app sees the run the command line made, and follows its job.
        status, _, body = http_get(server.port, f"/rocboard/live?run={run_id}&lang=en&drawn=")
        assert status == 200 and json.loads(body)["active"] is True
        wait_until(lambda: store.read(run_id).state == "running", 60, what="the job to run, as the app records it")
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        job_id = store.read(run_id).job_id
        assert "RUNNING" in slurm_cluster.run("squeue", "--noheader", f"--jobs={job_id}", "--format=%T").stdout  # the job trains on
        log = server.runs_dir / run_id / "output" / "trainer_log.jsonl"
        wait_until(lambda: log.exists() and log.stat().st_size > 0, 60, what="the trainer to log")
        lines_then = len(log.read_text().splitlines())

        server.spawn()  # the same runs directory, a new app
        wait_until(server.answers, 120, interval=0.5, what="the restarted app")
        wait_until(lambda: f"Re-attached to run {run_id} (Slurm job {job_id}, running)" in server.output(), 30, what="the re-attach line")
        status, _, body = http_get(server.port, f"/rocboard/live?run={run_id}&lang=en&drawn=")
        answer = json.loads(body)
        assert answer["active"] is True and answer["charts"]["loss"]["data"][0]["x"]
        assert len(log.read_text().splitlines()) >= lines_then

        listed = cli("status", "--runs-dir", str(server.runs_dir), "--json", env=env)
        mine = next(s for s in json.loads(listed.stdout) if s["id"] == run_id)
        assert (mine["state"], mine["where"], mine["job_id"], mine["slurm_state"]) == ("running", "slurm", job_id, "RUNNING")
        assert mine["step"] and mine["last_loss"] is not None

        stopped = cli("stop", run_id, "--runs-dir", str(server.runs_dir), env=env)
        assert stopped.returncode == 0, stopped.stderr + stopped.stdout
        assert run_id in stopped.stdout and "stopped" in stopped.stdout
        assert store.read(run_id).state == "stopped"
        wait_until(lambda: processes_of(server.runs_dir / run_id) == [], 30, what="nothing left of the job")
        one = json.loads(cli("status", run_id, "--json", "--runs-dir", str(server.runs_dir), env=env).stdout)
        assert one["state"] == "stopped" and one["slurm_state"] in ("COMPLETED", "CANCELLED")


@pytest.mark.hostile
def test_the_command_line_refuses_what_the_page_refuses(slurm_cluster, tmp_path, demo_assets):
    env = {"SLURM_CONF": str(slurm_cluster.conf)}
    runs = tmp_path / "runs"
    refused = cli("submit", str(demo_yaml(tmp_path / "a.yaml")), "--slurm", "--partition", "nope", "--runs-dir", str(runs), env=env)
    assert refused.returncode == 1 and "slurm-bad-partition" not in refused.stdout and "no partition nope" in refused.stderr
    assert not runs.exists() or [p for p in runs.iterdir() if not p.name.startswith(".")] == []
    chinese = cli("submit", str(demo_yaml(tmp_path / "b.yaml")), "--slurm", "--time", "soon", "--lang", "zh-CN", "--runs-dir", str(runs), env=env)
    assert chinese.returncode == 1 and "不是 Slurm 的时间格式" in chinese.stderr
    assert cli("status", "no-such-run", "--runs-dir", str(runs), env=env).returncode == 2
    assert cli("stop", "../../etc", "--runs-dir", str(runs), env=env).returncode == 2
    assert cli("submit", str(tmp_path / "missing.yaml"), "--runs-dir", str(runs), env=env).returncode == 2
