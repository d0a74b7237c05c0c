"""The batch script of a Slurm run, and the sbatch command line that submits it.

One task per node: each runs RocBoard's node task (backend/slurm/node_task.py) with the
Python RocBoard runs on, and the node task starts `llamafactory-cli train config.yaml` (which
starts torchrun and that node's workers when the run has a plan), samples the node's GPUs
into the run directory, and turns the stop signal into LLaMA-Factory's "stop and save".

What goes where, and why:
- `#SBATCH` lines: what the job asks of the cluster (the form's Slurm fields and the extra
  lines that passed placement.parse_sbatch_lines), so the script reads as the request.
- The sbatch command line: what names the run directory (`--chdir`, `--output`): a path is
  an argument there, never text for sbatch's #SBATCH parser to split.
- `MASTER_ADDR`: the first node of the allocation (`scontrol show hostnames`), as the address
  Slurm itself uses for it (its NodeAddr; the name where it has none): node names do not
  resolve on every cluster.
- `MASTER_PORT`: from the job id, so two jobs sharing a node never pick the same port.
- `--signal=USR1@...`: with a time limit of at least PRE_TIMEOUT_MIN_S, the node tasks are
  told PRE_TIMEOUT_S before it, and the run stops and saves as a Stop would.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from backend.config.placement import SlurmPlacement
from backend.i18n import Joined, Message

NODE_TASK = Path(__file__).resolve().with_name("node_task.py")
NODE_TASK_MARK = "node_task.py"  # in every node task's command line (tests count them by it)
STOP_SIGNAL = "USR1"  # what Stop sends the job's steps (backend/slurm/node_task.py handles it)
PRE_TIMEOUT_S = 180  # the run is told this long before its time limit
PRE_TIMEOUT_MIN_S = 20 * 60  # ... when the limit is at least this long
MASTER_PORT_BASE = 29500
MASTER_PORT_SPAN = 10000
SCRIPT_FILE = "slurm.sh"


def job_name(run_id: str) -> str:
    """The job's name in squeue: the run's id (its characters are Slurm-safe already)."""
    return "rocboard-" + re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:100]


def sbatch_lines(placement: SlurmPlacement, run_id: str) -> list[str]:
    """The #SBATCH lines of the request, in a readable order."""
    lines = [
        f"--job-name={job_name(run_id)}",
        f"--nodes={placement.nodes}",
        "--ntasks-per-node=1",
    ]
    if placement.cpus_per_task:
        lines.append(f"--cpus-per-task={placement.cpus_per_task}")
    if placement.gpus_per_node:
        lines.append(f"--gpus-per-node={placement.gpus_per_node}")
    if placement.memory:
        lines.append(f"--mem={placement.memory}")
    if placement.time_limit:
        lines.append(f"--time={placement.time_limit}")
    if placement.partition:
        lines.append(f"--partition={placement.partition}")
    if placement.account:
        lines.append(f"--account={placement.account}")
    limit = placement.time_limit_s
    if limit is not None and limit >= PRE_TIMEOUT_MIN_S:
        lines.append(f"--signal={STOP_SIGNAL}@{PRE_TIMEOUT_S}")  # Slurm may send it up to a minute early
    lines += [f"--{name}={value}" if value else f"--{name}" for name, value in placement.extra]
    return [f"#SBATCH {line}" for line in lines]


def batch_script(run_dir: Path, run_id: str, placement: SlurmPlacement, workers_per_node: int, python: str | None = None) -> str:
    """The script sbatch runs on the job's first node."""
    python = python or sys.executable
    srun = ["srun", f"--nodes={placement.nodes}", "--ntasks-per-node=1"]
    if placement.cpus_per_task:
        # Since Slurm 22.05 srun no longer takes --cpus-per-task from the allocation.
        srun.append(f"--cpus-per-task={placement.cpus_per_task}")
    srun += ["--kill-on-bad-exit=1", python, str(NODE_TASK), str(run_dir)]
    # The two comment lines are messages: the page's command preview shows them in its language,
    # the file written from this (str) holds the English.
    return Joined(
        [
            "#!/bin/bash",
            *sbatch_lines(placement, run_id),
            Message("slurm.script.written_by", run_id=run_id),
            Message("slurm.script.starts", workers=workers_per_node),
            "set -euo pipefail",
            'MASTER_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"',
            'MASTER_ADDR="$(scontrol show node "$MASTER_NODE" --oneliner | tr \' \' \'\\n\' | sed -n \'s/^NodeAddr=//p\')"',
            'export MASTER_ADDR="${MASTER_ADDR:-$MASTER_NODE}"',
            f'export MASTER_PORT="$(({MASTER_PORT_BASE} + SLURM_JOB_ID % {MASTER_PORT_SPAN}))"',
            'echo "RocBoard: job $SLURM_JOB_ID on $SLURM_JOB_NODELIST, master $MASTER_NODE ($MASTER_ADDR:$MASTER_PORT)"',
            shlex.join(srun),
            "",
        ],
        "\n",
    )


def sbatch_argv(run_dir: Path, script: Path) -> list[str]:
    """What submits the script: its folder and output file are arguments, not #SBATCH text."""
    return ["sbatch", "--parsable", f"--chdir={run_dir}", f"--output={run_dir}/slurm-%j.log", str(script)]


__all__ = ["NODE_TASK", "NODE_TASK_MARK", "PRE_TIMEOUT_S", "SCRIPT_FILE", "STOP_SIGNAL", "batch_script", "job_name", "sbatch_argv", "sbatch_lines"]
