"""Runs on a Slurm cluster (docs/multi-gpu.md, "Slurm").

- `parse.py`: what sbatch, squeue, scontrol and sacct print, as typed values (pure).
- `client.py`: those commands, run with timeouts and an allow-listed environment.
- `states.py`: Slurm's job states and reasons as a run's state and words (pure).
- `script.py`: the batch script of a run and the sbatch command line.
- `preflight.py`: would the cluster take the job, and could it ever run it? (before a run exists)
- `executor.py`: submit, follow (one poller thread), stop, re-attach by job id.
- `node_task.py`: what each node runs: the trainer, its telemetry, the stop signal.

What a Slurm run adds to its run directory (the cluster's nodes share it):

    slurm.sh              the batch script, as submitted
    launch.json           the environment the node tasks give their trainers
    slurm-<job id>.log    the batch script's own output (one per attempt's job)
    nodes/<rank>/         each node's task.json (host, pid, end), samples.jsonl, and (rank > 0) train.log
"""

NODES_DIR = "nodes"
TASK_FILE = "task.json"
NODE_SAMPLES_FILE = "samples.jsonl"
NODE_LOG_FILE = "train.log"


def node_dir(rank: int) -> str:
    """A node's folder inside the run directory."""
    return f"{NODES_DIR}/{rank}"
