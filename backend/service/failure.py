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
