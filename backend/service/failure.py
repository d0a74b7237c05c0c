"""Why a run failed, in the page's language: what Slurm ended it for (a time limit, a node),
else what its train.log (and a Slurm job's own log) says. Asked by the run panel
(run_view.panel_view) and the Evaluate tab (evaluation_desk) alike."""

from __future__ import annotations

from backend.diagnose import summarize_failure
from backend.runs import RunState, RunStore
from backend.runs.resume import Refusal, resume_plan
from backend.service.monitors import log_tail
from backend.view import slurm_cause


def failure_cause(store: RunStore, state: RunState, locale: str = "en") -> tuple[str, str]:
    """(cause, fix) of the failed run `state`; empty when unknown."""
    run_dir = store.run_dir(state.id)
    if not state.local:
        plan = resume_plan(store, state.id, state)
        checkpoint = "" if isinstance(plan, Refusal) else plan.checkpoint.name
        cause, fix = slurm_cause(state, checkpoint, locale)
        if cause:
            return cause, fix
    text = log_tail(run_dir, lines=400, max_bytes=400_000)
    if state.job_id:
        # The batch script's own output: srun's errors, a node that could not start Python.
        text += "\n" + log_tail(run_dir, lines=200, max_bytes=100_000, name=f"slurm-{state.job_id}.log")
    top = summarize_failure(text, state.exit_code).diagnosis
    return top.text(locale) if top is not None else ("", "")


SLURM_ENDS = ("TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def failure_cause_id(store: RunStore, state: RunState) -> tuple[str, dict[str, object]]:
    """The cause of the failed run `state` as a message id and its values, for a reader in any
    language (backend/notify: the word sent when a run fails): what Slurm ended it for, else
    the diagnosis of its logs, else why RocBoard recorded it failed, else its exit code;
    ("", {}) when nothing is known."""
    if not state.local and state.slurm_state in SLURM_ENDS:
        limit = (state.stop_reason_params or {}).get("limit", "?")
        return f"slurm.cause.{state.slurm_state}", {"limit": str(limit), "nodes": state.slurm_nodes or "?", "checkpoint": ""}
    run_dir = store.run_dir(state.id)
    text = log_tail(run_dir, lines=400, max_bytes=400_000)
    if state.job_id:
        text += "\n" + log_tail(run_dir, lines=200, max_bytes=100_000, name=f"slurm-{state.job_id}.log")
    top = summarize_failure(text, state.exit_code).diagnosis
    if top is not None:
        return f"diagnose.{top.rule}.cause", {}
    if state.stop_reason.startswith("reason."):
        return state.stop_reason, dict(state.stop_reason_params or {})
    if state.exit_code is not None:
        return "notify.cause.exit_code", {"code": state.exit_code}
    return "", {}
