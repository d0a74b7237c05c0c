"""What each node of a Slurm run runs (one task per node, started by the batch script's srun).

Run by path with the Python RocBoard runs on: `python backend/slurm/node_task.py RUN_DIR`.
On its node it

- starts `llamafactory-cli train config.yaml` in the run directory with the environment a
  local start would give it (backend/runs/launcher.py trainer_env: the allow-listed part of the
  job's environment, the run's settings from launch.json, the plan's variables, with this
  node's NODE_RANK and the MASTER_ADDR / MASTER_PORT the batch script found),
- writes the trainer's output to the run's train.log (node 0) or nodes/<rank>/train.log,
- samples this node's GPUs (or the trainer's memory on a CPU node) into nodes/<rank>/samples.jsonl
  with the app's own sampler, each reading labelled with the node's name,
- records itself in nodes/<rank>/task.json (host, pid, start; at the end: exit code, and
  whether it was stopped) so the run's end can be told from its files even after Slurm has
  forgotten the job,
- turns SIGUSR1 (RocBoard's Stop: `scancel --signal=USR1`, or `--signal=USR1@...` before the
  time limit) into the local stop: SIGABRT to the workers (LLaMA-Factory's "stop after this
  step and save"), then SIGTERM, then SIGKILL, within the launcher's 10 s. The trainer's tree
  ignores SIGUSR1 (inherited SIG_IGN): scancel signals every process of the step, and only
  this one must act on it.

It exits 0 after a stop (the job ends COMPLETED, not FAILED), else with the trainer's code.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

if __name__ == "__main__":
    # Run by path: the package root first, this folder not at all (its modules are not top-level).
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from backend.runs import LOG_FILE, safe_files
from backend.runs.launcher import ProcessIdentity, stop_tree, trainer_command, trainer_env
from backend.runs.queue import read_launch_env
from backend.slurm import NODE_LOG_FILE, NODE_SAMPLES_FILE, NODES_DIR, TASK_FILE, node_dir


def _ignore_stop_signal() -> None:
    """In the trainer, before exec: SIGUSR1 ignored, for it and everything it starts."""
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


def _write_task(run_dir: Path, rank: int, record: dict) -> None:
    safe_files.write_atomic(run_dir, f"{node_dir(rank)}/{TASK_FILE}", (json.dumps(record, indent=2) + "\n").encode("utf-8"))


def launch_settings(run_dir: Path, rank: int, environ: dict[str, str]) -> dict[str, str]:
    """The variables Launcher.start would get for this node: the run's (launch.json), this
    node's rank, and the master the batch script found (multi-process runs only)."""
    settings = read_launch_env(run_dir)
    if "NNODES" in settings:
        settings["NODE_RANK"] = str(rank)
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if environ.get(name):
                settings[name] = environ[name]
    return settings


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: node_task.py RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    environ = dict(os.environ)
    rank = int(environ.get("SLURM_NODEID", "0") or 0)
    node = (environ.get("SLURMD_NODENAME") or socket.gethostname())[:64]
    job_id = environ.get("SLURM_JOB_ID", "")
    safe_files.make_dir(run_dir, NODES_DIR)
    safe_files.make_dir(run_dir, node_dir(rank))
    log_relative = LOG_FILE if rank == 0 else f"{node_dir(rank)}/{NODE_LOG_FILE}"
    log = os.fdopen(safe_files.open_in_run(run_dir, log_relative, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")

    stop_requested = threading.Event()
    terminated = threading.Event()

    def on_stop(signum, frame) -> None:
        stop_requested.set()

    def on_term(signum, frame) -> None:
        terminated.set()  # Slurm's own end (scancel, the time limit): the trainer got it too

    signal.signal(signal.SIGUSR1, on_stop)
    signal.signal(signal.SIGTERM, on_term)
    try:
        env = trainer_env(run_dir, launch_settings(run_dir, rank, environ), base=environ)
        command = trainer_command()
        log.write(f"RocBoard: node {node} (rank {rank}) of Slurm job {job_id}: {' '.join(command)}\n".encode("utf-8", "replace"))
        log.flush()
        process = subprocess.Popen(
            command, cwd=run_dir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=_ignore_stop_signal, close_fds=True,
        )  # fmt: skip
    except Exception as error:  # a missing launch.json, llamafactory-cli not on this node...
        log.write(f"RocBoard: node {node} could not start the trainer: {type(error).__name__}: {error}\n".encode("utf-8", "replace"))
        log.close()
        _write_task(run_dir, rank, {"node": node, "rank": rank, "job_id": job_id, "started_at": time.time(), "ended_at": time.time(), "exit_code": 127, "error": str(error)[:500]})
        return 127
    log.close()
    identity = ProcessIdentity.of(process.pid)
    record = {"node": node, "rank": rank, "job_id": job_id, "host": socket.gethostname()[:253], "pid": process.pid, "pid_started": identity and identity.started, "started_at": time.time()}
    _write_task(run_dir, rank, record)

    from backend.telemetry.sampler import Sampler

    sampler = Sampler(node=node)
    sampler.watch(run_dir / node_dir(rank) / NODE_SAMPLES_FILE, process.pid)
    sampler.start()
    stopped = False
    while process.poll() is None:
        if stop_requested.wait(0.5) and not stopped:
            stopped = True
            if identity is not None:
                stop_tree(identity)
    code = process.wait()
    sampler.stop()
    record.update(ended_at=time.time(), exit_code=code, stopped=stopped, terminated=terminated.is_set())
    _write_task(run_dir, rank, record)
    if stopped:
        return 0
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
