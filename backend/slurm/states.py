"""Slurm's job states and reasons, as a run's state and words: pure functions.

A Slurm run is `pending` while Slurm holds the job (PENDING, CONFIGURING, held, requeued...),
`running` while it runs, and at the end `finished`, `stopped` or `failed`. What ended it is a
message id (`reason.slurm_*`) with its values, rendered in the page's language like every
other reason; why it waits is `slurm.reason.<Reason>` (the catalogue has words for the
reasons users meet; any other is shown as Slurm wrote it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.slurm.parse import JobInfo, format_time_limit

# Why a job waits (squeue %r) that the catalogue puts in words (slurm.reason.<name>); the
# rest are shown as Slurm writes them, with slurm.reason.other.
PENDING_REASONS: tuple[str, ...] = (
    "None", "Resources", "Priority", "Dependency", "BeginTime", "JobHeldUser", "JobHeldAdmin",
    "ReqNodeNotAvail", "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "PartitionDown",
    "PartitionInactive", "NodeDown", "BadConstraints", "InvalidAccount", "InvalidQOS", "Reservation",
    "Licenses", "QOSMaxJobsPerUserLimit", "QOSMaxGRESPerUser", "QOSMaxCpuPerUserLimit", "QOSGrpCpuLimit",
    "QOSGrpGRES", "AssocMaxJobsLimit", "AssocGrpCpuLimit", "AssocGrpGRES", "launch_failed_requeued_held",
    "Prolog", "Cleaning", "BurstBufferResources",
)  # fmt: skip


def reason_key(reason: str) -> str:
    """The catalogue id for a pending reason: "ReqNodeNotAvail, UnavailableNodes:n1" ->
    slurm.reason.ReqNodeNotAvail; an unknown one -> slurm.reason.other."""
    word = reason.split(",", 1)[0].strip().replace(" ", "_") or "None"
    if word.startswith(("QOSMax", "QOSGrp", "AssocMax", "AssocGrp")) and word not in PENDING_REASONS:
        return "slurm.reason.QOSLimit"
    return f"slurm.reason.{word}" if word in PENDING_REASONS else "slurm.reason.other"


@dataclass(frozen=True)
class RunUpdate:
    """What a run's state.json becomes after Slurm said `job` (and its node tasks wrote)."""

    state: str
    slurm_state: str
    slurm_reason: str = ""
    slurm_nodes: str = ""
    exit_code: int | None = None
    stop_reason: str = ""
    stop_reason_params: dict[str, Any] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.state in ("finished", "failed", "stopped")


def tasks_stopped(tasks: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a node task stopped its trainer on SIGUSR1 (Stop, or the warning before the
    time limit)."""
    return any(task.get("stopped") is True for task in tasks)


def update_for(job: JobInfo, stop_requested: bool, tasks: Sequence[Mapping[str, Any]] = ()) -> RunUpdate:
    """The run's state for what Slurm says of its job. `stop_requested`: RocBoard's Stop was
    pressed; `tasks`: the node tasks' records (nodes/<rank>/task.json)."""
    nodes = job.nodes
    if job.waiting:
        return RunUpdate("pending", job.state, job.reason, nodes)
    if job.running:
        return RunUpdate("running", job.state, "", nodes)
    # Ended by a signal (the time limit's SIGTERM: ExitCode=0:15) reads as the local launcher
    # records it: the signal, negative.
    code = -job.exit_signal if job.exit_signal else job.exit_code
    if stop_requested:
        return RunUpdate("stopped", job.state, job.reason, nodes, code, "reason.stopped_by_user")
    if tasks_stopped(tasks) and job.state in ("COMPLETED", "FAILED", "CANCELLED"):
        return RunUpdate("stopped", job.state, job.reason, nodes, code, "reason.slurm_saved_before_limit")
    if job.state == "COMPLETED":
        return RunUpdate("finished", job.state, "", nodes, 0 if code is None else code)
    if job.state == "CANCELLED":
        return RunUpdate("stopped", job.state, job.reason, nodes, code, "reason.slurm_cancelled", {"job": job.job_id})
    limit = format_time_limit(job.time_limit_s) if job.time_limit_s is not None else "?"
    reasons: dict[str, tuple[str, dict[str, Any]]] = {
        "TIMEOUT": ("reason.slurm_timeout", {"limit": limit}),
        "NODE_FAIL": ("reason.slurm_node_fail", {"nodes": nodes or "?"}),
        "OUT_OF_MEMORY": ("reason.slurm_out_of_memory", {}),
        "PREEMPTED": ("reason.slurm_preempted", {}),
        "BOOT_FAIL": ("reason.slurm_boot_fail", {"nodes": nodes or "?"}),
        "DEADLINE": ("reason.slurm_deadline", {}),
        "FAILED": ("reason.slurm_failed", {"code": "?" if code is None else code, "job": job.job_id}),
    }
    reason, params = reasons.get(job.state, ("reason.slurm_ended", {"state": job.state}))
    return RunUpdate("failed", job.state, job.reason, nodes, code, reason, params)


def update_when_forgotten(slurm_state: str, stop_requested: bool, tasks: Sequence[Mapping[str, Any]], files_say: tuple[str, str]) -> RunUpdate:
    """The end of a job Slurm no longer knows (it ended more than MinJobAge ago, and there is no
    accounting): told from its node tasks' records and the run's files (`files_say`: what
    launcher.derive_final_state reads there)."""
    if stop_requested or tasks_stopped(tasks):
        return RunUpdate("stopped", slurm_state, "", "", None, "reason.stopped_by_user" if stop_requested else "reason.slurm_saved_before_limit")
    final, reason = files_say
    ended = [task for task in tasks if task.get("ended_at") is not None]
    codes = [task.get("exit_code") for task in ended]
    if tasks and len(ended) == len(tasks) and all(code == 0 for code in codes) and final == "finished":
        return RunUpdate("finished", slurm_state, "", "", 0, reason)
    return RunUpdate("failed", slurm_state, "", "", None, "reason.slurm_job_gone", {})


__all__ = ["PENDING_REASONS", "RunUpdate", "reason_key", "tasks_stopped", "update_for", "update_when_forgotten"]
