"""Slurm's commands, run for RocBoard: argument lists (never a shell), a timeout on every
call, bounded output, and an allow-listed environment (backend/security/child_env.py) plus
SLURM_CONF when the operator set one. Each call returns what backend/slurm/parse.py read
from the output, or a `SlurmProblem` saying in words why nothing could be read.

Nothing here blocks the page: the executor calls these from its own threads (the poller)
or from a Start / Stop, which the page runs as events of their own, each call bounded by
its timeout.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.slurm import parse
from backend.slurm.parse import JobInfo, Node, Partition, SbatchRefusal
from backend.telemetry.tool import ToolOutput, find_tool, run_tool

# A Slurm command answers in milliseconds when slurmctld is well; a busy controller can take
# seconds. Past these the call is abandoned and the page says Slurm did not answer.
QUERY_TIMEOUT_S = 15.0
SUBMIT_TIMEOUT_S = 30.0
TOOLS = ("sbatch", "squeue", "scontrol", "scancel")
# Variables of the operator's environment a Slurm client needs beside child_env's list:
# which cluster (SLURM_CONF). Every other SLURM_* / SBATCH_* / SQUEUE_* is left out: inside an
# allocation they describe that allocation and would change what sbatch submits or what
# squeue prints.
CLIENT_NAMES = ("SLURM_CONF",)
# Where Slurm's commands look for slurm.conf without SLURM_CONF (Debian's, the default
# prefix's, and slurmd's cache in configless mode).
SLURM_CONF_PLACES = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf", "/run/slurm/conf/slurm.conf", "/var/spool/slurmd/conf-cache/slurm.conf")


@dataclass(frozen=True)
class SlurmProblem:
    """Why a Slurm command gave no answer: `rule` is also the message id of its words
    (`check.<rule>.problem` / `.fix`)."""

    rule: str  # slurm-missing, slurm-timeout, slurm-unreachable, slurm-error
    command: str
    detail: str = ""

    def params(self) -> dict[str, Any]:
        return {"command": self.command, "detail": self.detail}


def _first_error(output: ToolOutput) -> str:
    lines = [line.strip() for line in (output.stderr or output.stdout).splitlines() if line.strip()]
    return lines[-1][:300] if lines else f"exit code {output.returncode}"


class SlurmClient:
    """Runs Slurm's client commands with `env` (default: this process's environment at each
    call) as the base of their allow-listed environment."""

    def __init__(self, env: Mapping[str, str] | None = None, query_timeout_s: float = QUERY_TIMEOUT_S, submit_timeout_s: float = SUBMIT_TIMEOUT_S):
        self._env = dict(env) if env is not None else None
        self.query_timeout_s = query_timeout_s
        self.submit_timeout_s = submit_timeout_s

    @property
    def env(self) -> Mapping[str, str]:
        return self._env if self._env is not None else os.environ

    def own_env(self) -> dict[str, str]:
        return {name: self.env[name] for name in CLIENT_NAMES if self.env.get(name)}

    def missing(self) -> str:
        """The Slurm commands not on PATH ("" when all are)."""
        return ", ".join(tool for tool in TOOLS if find_tool(tool, self.env) is None)

    def configured(self) -> bool:
        """Whether this machine is set up to submit to a cluster: Slurm's commands on PATH and
        a slurm.conf they would read (SLURM_CONF, the usual places, or slurmd's configless
        cache). No command is run: the Runs tab asks on every visit. A cluster reached some
        other way is not seen here; its first run shows the Slurm queue anyway."""
        if self.missing():
            return False
        named = self.env.get("SLURM_CONF")
        places = [Path(named)] if named else [Path(place) for place in SLURM_CONF_PLACES]
        return any(place.is_file() for place in places)

    def run(self, *argv: str, timeout_s: float | None = None, input_text: str | None = None, cwd: Path | None = None) -> ToolOutput:
        return run_tool(argv, timeout_s or self.query_timeout_s, self.env, own=self.own_env(), input_text=input_text, cwd=cwd)

    def _problem(self, output: ToolOutput) -> SlurmProblem | None:
        """Why `output` is no answer (a command missing, a timeout, a controller that cannot be
        reached), or None when the command ran (whatever its exit code said)."""
        command = " ".join(output.argv[:2])
        if output.error.endswith("not found on PATH"):
            return SlurmProblem("slurm-missing", output.argv[0], output.error)
        if output.error.startswith("timed out"):
            return SlurmProblem("slurm-timeout", command, output.error)
        if output.error:
            return SlurmProblem("slurm-error", command, output.error)
        refusal = parse.parse_sbatch_refusal(output.stderr) if output.returncode else None
        if refusal is not None and refusal.rule == "slurm-unreachable":
            return SlurmProblem("slurm-unreachable", command, refusal.detail)
        return None

    # --- questions ----------------------------------------------------------------------

    def jobs(self, job_ids: list[str]) -> tuple[dict[str, JobInfo], SlurmProblem | None]:
        """What squeue knows of `job_ids` (ended ones too, for as long as slurmctld keeps them:
        MinJobAge, 300 s by default). An id it no longer knows is simply not in the answer."""
        if not job_ids:
            return {}, None
        output = self.run("squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}", f"--format={parse.SQUEUE_FORMAT}")
        problem = self._problem(output)
        if problem is not None:
            return {}, problem
        if output.returncode != 0:
            if "Invalid job id" in output.stderr:
                return {}, None  # none of them is known any more
            return {}, SlurmProblem("slurm-error", "squeue", _first_error(output))
        return {job.job_id: job for job in parse.parse_squeue(output.stdout) if job.job_id in job_ids}, None

    def job(self, job_id: str) -> tuple[JobInfo | None, SlurmProblem | None]:
        """`scontrol show job` (with the exit code); (None, None) for an id Slurm forgot."""
        output = self.run("scontrol", "show", "job", "--oneliner", job_id)
        problem = self._problem(output)
        if problem is not None:
            return None, problem
        if output.returncode != 0:
            if "Invalid job id" in output.stderr:
                return None, None
            return None, SlurmProblem("slurm-error", "scontrol show job", _first_error(output))
        return parse.parse_show_job(output.stdout), None

    def accounting(self, job_id: str) -> JobInfo | None:
        """sacct's record of a job slurmctld forgot; None without accounting (sacct says "Slurm
        accounting storage is disabled") or when it has none."""
        output = self.run("sacct", "--noheader", "--parsable2", f"--jobs={job_id}", f"--format={parse.SACCT_FIELDS}")
        if output.error or output.returncode != 0:
            return None
        return parse.parse_sacct(output.stdout, job_id)

    def partitions(self) -> tuple[list[Partition], SlurmProblem | None]:
        output = self.run("scontrol", "show", "partition", "--oneliner")
        problem = self._problem(output)
        if problem is None and output.returncode != 0:
            problem = SlurmProblem("slurm-error", "scontrol show partition", _first_error(output))
        return ([] if problem else parse.parse_show_partitions(output.stdout)), problem

    def nodes(self) -> tuple[list[Node], SlurmProblem | None]:
        output = self.run("scontrol", "show", "node", "--oneliner")
        problem = self._problem(output)
        if problem is None and output.returncode != 0:
            problem = SlurmProblem("slurm-error", "scontrol show node", _first_error(output))
        return ([] if problem else parse.parse_show_nodes(output.stdout)), problem

    # --- actions --------------------------------------------------------------------------

    def test_only(self, script: str, cwd: Path) -> tuple[SbatchRefusal | None, SlurmProblem | None]:
        """`sbatch --test-only` with the script on stdin: would Slurm take this job? Nothing
        is submitted. (None, None): it would."""
        output = self.run("sbatch", "--test-only", timeout_s=self.submit_timeout_s, input_text=script, cwd=cwd)
        problem = self._problem(output)
        if problem is not None:
            return None, problem
        if output.returncode != 0:
            return parse.parse_sbatch_refusal(output.stderr), None
        return None, None

    def submit(self, argv: list[str], cwd: Path) -> tuple[str | None, SbatchRefusal | None, SlurmProblem | None]:
        """`sbatch --parsable ... SCRIPT` (backend/slurm/script.py sbatch_argv) from `cwd`:
        (job id, None, None), or why not."""
        output = self.run(*argv, timeout_s=self.submit_timeout_s, cwd=cwd)
        problem = self._problem(output)
        if problem is not None:
            return None, None, problem
        if output.returncode != 0:
            return None, parse.parse_sbatch_refusal(output.stderr), None
        job_id = parse.parse_sbatch_job_id(output.stdout)
        if job_id is None:
            return None, SbatchRefusal("slurm-refused", f"sbatch printed no job id: {output.stdout.strip()[:200]!r}"), None
        return job_id, None, None

    def signal(self, job_id: str, signal_name: str) -> SlurmProblem | None:
        """`scancel --signal=NAME ID`: the signal reaches every process of the job's steps
        (not the batch script), on every node."""
        output = self.run("scancel", f"--signal={signal_name}", job_id)
        problem = self._problem(output)
        if problem is None and output.returncode != 0:
            problem = SlurmProblem("slurm-error", "scancel", _first_error(output))
        return problem

    def cancel(self, job_id: str) -> SlurmProblem | None:
        """`scancel ID`: SIGTERM to every step and the batch script, SIGKILL KillWait later."""
        output = self.run("scancel", job_id)
        problem = self._problem(output)
        if problem is None and output.returncode != 0:
            problem = SlurmProblem("slurm-error", "scancel", _first_error(output))
        return problem


__all__ = ["CLIENT_NAMES", "QUERY_TIMEOUT_S", "SUBMIT_TIMEOUT_S", "SlurmClient", "SlurmProblem"]
