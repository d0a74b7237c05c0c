"""Slurm runs and this machine's queue: how soon things happen, and what following jobs costs.

On the test cluster of tests/slurm_cluster.py (slurmctld, two slurmd, accounting: started by
the bench in a temporary folder; as root, with Debian's Slurm packages), the real
llamafactory-cli on the demo model:

- **submit**: `RocBoard.start` of a one-node demo run to sbatch's job id (the preflight's
  `scontrol show partition|node`, `sbatch --test-only`, the run directory, `sbatch`), then
  to RUNNING as the run records it, to the first loss point, to the end;
- **following**: one poll (`squeue` of every job, as the poller asks every 2 s) with 1 and
  with 20 jobs waiting, and the poller thread's CPU over 10 s following 20 waiting jobs;
- **stop**: Stop of a two-node job to its end on both nodes, both trainers saved;
- **queue hand-over** (no Slurm): the gap between a queued run's predecessor's end and the
  queued run's trainer start, here.

Goals: a poll of 20 jobs under 200 ms; the poller under 2 % of a core following 20 jobs; a
two-node stop within 15 s; a queued run started within 3 s of its predecessor's end.

`python -m bench.bench_slurm [--quick]`.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from bench import bench_arguments, conditions, conditions_line, goal_row, show, spread
from tests.harness import wait_until

POLL_GOAL_S = 0.2
POLLER_CPU_GOAL_PERCENT = 2.0
STOP_GOAL_S = 15.0
HANDOVER_GOAL_S = 3.0


def _board(runs: Path):
    from backend.service import RocBoard

    return RocBoard(runs)


def _wait_state(board, run_id: str, predicate, what: str, timeout: float = 300.0):
    return wait_until(lambda: (lambda s: s if predicate(s) else None)(board.run_manager.refresh(run_id)), timeout, interval=0.05, what=what)


def submit_once(board, name: str) -> dict[str, float]:
    from backend.service import demo_form

    form = {**demo_form(), "run_on": "slurm", "run_name": name}
    board.llamafactory_findings(board.parse(form)[0])  # LLaMA-Factory's answer (seconds, cold) is not Slurm's
    started = time.monotonic()
    result = board.start(form)
    assert result.started, [f.line() for f in result.findings]
    submitted = time.monotonic()
    run_id = result.run.id
    _wait_state(board, run_id, lambda s: s.state in ("running", "finished", "failed", "stopped"), "the job to run")
    running = time.monotonic()
    wait_until(lambda: board.snapshot(run_id).points, 300, interval=0.05, what="the first loss point")
    first_point = time.monotonic()
    ended = _wait_state(board, run_id, lambda s: not s.active, "the job to end")
    assert ended.state == "finished", ended
    return {
        "to_job_id_s": submitted - started,
        "to_running_s": running - started,
        "to_first_point_s": first_point - started,
        "to_end_s": time.monotonic() - started,
    }


def following(board, cluster, folder: Path) -> dict[str, Any]:
    """Polls of 1 and 20 waiting jobs, and the poller's CPU following 20 for 10 s."""
    from backend.slurm.executor import JobWatch

    blocker = folder / "blocker.sh"
    blocker.write_text("#!/bin/bash\nsleep 600\n")
    waiting = folder / "waiting.sh"
    waiting.write_text("#!/bin/bash\nsleep 1\n")
    jobs = []
    done = cluster.run("sbatch", "--parsable", "--nodes=2", "--cpus-per-task=2", f"--output={folder}/%j.out", str(blocker))
    blocker_job = done.stdout.strip()
    try:
        for _ in range(20):
            jobs.append(cluster.run("sbatch", "--parsable", "--cpus-per-task=2", f"--output={folder}/%j.out", str(waiting)).stdout.strip())
        watch = JobWatch(board.run_manager.slurm.client)
        one, twenty = [], []
        for _ in range(5):
            began = time.perf_counter()
            watch.poll(jobs[:1])
            one.append(time.perf_counter() - began)
            began = time.perf_counter()
            seen = watch.poll(jobs)
            twenty.append(time.perf_counter() - began)
        assert len(seen) == 20 and all(job.state == "PENDING" for job in seen.values())
        process = psutil.Process()
        follower = JobWatch(board.run_manager.slurm.client)
        threads_before = process.cpu_times()
        wall = time.monotonic()
        for job in jobs:
            follower.want(job)
        time.sleep(10.0)
        for job in jobs:
            follower.drop(job)
        threads_after = process.cpu_times()
        seconds = time.monotonic() - wall
        cpu = (threads_after.user + threads_after.system - threads_before.user - threads_before.system) / seconds * 100
        # squeue itself (a child per poll) is not this process's CPU: counted apart.
        children = (threads_after.children_user + threads_after.children_system - threads_before.children_user - threads_before.children_system) / seconds * 100
        return {"poll_1_s": spread(one), "poll_20_s": spread(twenty), "poller_cpu_percent": cpu, "squeue_cpu_percent": children}
    finally:
        cluster.run("scancel", blocker_job, *jobs)


def two_node_stop(board) -> dict[str, Any]:
    from backend.service import demo_form

    result = board.start({**demo_form(), "run_on": "slurm", "run_name": "stop", "slurm_nodes": 2, "max_steps": 100_000, "save_steps": 100_000})
    run_id = result.run.id
    _wait_state(board, run_id, lambda s: s.state == "running", "the two-node job to run")
    wait_until(lambda: len(board.snapshot(run_id).points) >= 5, 300, interval=0.2, what="loss points")
    began = time.monotonic()
    board.stop(run_id)
    ended = _wait_state(board, run_id, lambda s: not s.active, "the two-node job to stop", 120)
    return {"stop_s": time.monotonic() - began, "state": ended.state, "adapter": (board.store.run_dir(run_id) / "output" / "adapter_model.safetensors").is_file()}


def queue_handover(folder: Path, repeats: int) -> dict[str, Any]:
    from backend.service import demo_form

    board = _board(folder / "queue-runs")
    board.keep_queue()  # as the app does: its ends hand over at once
    gaps = []
    first = board.start({**demo_form(), "run_name": "first", "max_steps": 30}, intent="first")
    previous = first.run.id
    for number in range(repeats):
        queued = board.start({**demo_form(), "run_name": f"queued-{number}", "max_steps": 30}, intent=f"q{number}")
        assert queued.queued, queued
        after = _wait_state(board, queued.run.id, lambda s: s.state != "queued", "the queued run to start", 300)
        before = board.store.read(previous)
        gaps.append(after.started_at - before.ended_at)
        previous = queued.run.id
    _wait_state(board, previous, lambda s: not s.active, "the last run to end", 300)
    board.run_manager.stop_keeping_queue()
    return {"gap_s": spread(gaps)}


def run(quick: bool = False) -> dict[str, Any]:
    from tests.slurm_cluster import running_cluster, unavailable

    result: dict[str, Any] = {"conditions": conditions()}
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as name:
        folder = Path(name)
        result["queue"] = queue_handover(folder, 2 if quick else 3)
        why = unavailable()
        if why:
            result["skipped"] = why
        else:
            with running_cluster(folder / "cluster") as cluster:
                board = _board(folder / "runs")
                result["submit"] = [submit_once(board, f"bench-{n}") for n in range(1 if quick else 3)]
                result["following"] = following(board, cluster, folder)
                result["stop"] = two_node_stop(board)
    gap = result["queue"]["gap_s"]["median"]
    goals = [goal_row("queued run started after its predecessor's end", f"≤ {HANDOVER_GOAL_S:g} s", f"{gap * 1000:.0f} ms", gap <= HANDOVER_GOAL_S)]
    if "skipped" in result:
        goals.append(goal_row("Slurm figures", "taken", f"skipped: {result['skipped']}", "skipped"))
    else:
        poll = result["following"]["poll_20_s"]["median"]
        cpu = result["following"]["poller_cpu_percent"]
        stop = result["stop"]["stop_s"]
        goals += [
            goal_row("one squeue poll of 20 waiting jobs", f"< {POLL_GOAL_S * 1000:.0f} ms", f"{poll * 1000:.0f} ms", poll < POLL_GOAL_S),
            goal_row(
                "poller's CPU following 20 jobs (squeue's own included)",
                f"< {POLLER_CPU_GOAL_PERCENT:g} % of a core",
                f"{cpu + result['following']['squeue_cpu_percent']:.2f} %",
                cpu + result["following"]["squeue_cpu_percent"] < POLLER_CPU_GOAL_PERCENT,
            ),
            goal_row("Stop of a two-node job to its end, both saved", f"≤ {STOP_GOAL_S:g} s", f"{stop:.1f} s", stop <= STOP_GOAL_S and result["stop"]["adapter"]),
        ]
    result["goals"] = goals
    return result


def report(result: dict[str, Any]) -> str:
    lines = []
    gaps = result["queue"]["gap_s"]
    lines.append(f"Queue hand-over here (previous run's end -> the queued run's trainer start): {show(gaps, 'ms', 1000, 0)}")
    if "skipped" in result:
        lines.append(f"Slurm figures skipped: {result['skipped']}")
    else:
        submits = result["submit"]
        for key, words in (
            ("to_job_id_s", "Start -> job id (checks, preflight, run dir, sbatch; LLaMA-Factory's answer cached)"),
            ("to_running_s", "Start -> RUNNING recorded"),
            ("to_first_point_s", "Start -> first loss point"),
            ("to_end_s", "Start -> finished (100 steps)"),
        ):
            lines.append(f"One-node demo on Slurm, {words}: {show(spread([s[key] for s in submits]))}")
        f = result["following"]
        lines.append(f"One squeue poll: 1 job {show(f['poll_1_s'], 'ms', 1000, 0)}, 20 waiting jobs {show(f['poll_20_s'], 'ms', 1000, 0)}")
        lines.append(f"Following 20 waiting jobs for 10 s (5 polls): the poller {f['poller_cpu_percent']:.3f} % of a core, its squeue children {f['squeue_cpu_percent']:.3f} %")
        stop = result["stop"]
        lines.append(f"Stop of a two-node job: {stop['stop_s']:.1f} s to {stop['state']}, adapter saved: {stop['adapter']}")
    lines.append(conditions_line(result["conditions"]))
    return "\n".join(lines)


if __name__ == "__main__":
    outcome = run(quick=bench_arguments())
    print(report(outcome))
    for row in outcome["goals"]:
        print(row)
    sys.exit(0)
