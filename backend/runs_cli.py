"""Runs from the command line, for people who script their clusters: the same checks, runs
directory and queue as the page, so the page sees a run made here at once, and the other way
round.

    python app.py submit CONFIG.yaml [--preset NAME] [--name NAME] [--runs-dir runs]
                         [--gpus 0,1] [--sysfs-root /sys] [--cpu-slots N]
                         [--slurm [--partition P] [--account A] [--nodes N] [--gpus-per-node G]
                                  [--cpus-per-task C] [--mem 64G] [--time HH:MM:SS] [--sbatch LINE]...]
    python app.py status [RUN_ID] [--json] [--runs-dir runs]
    python app.py status --sweep ID [--metric M] [--json]     (backend/sweep/cli.py)
    python app.py stop RUN_ID [--no-wait] [--runs-dir runs]

`status` also says the GPU health alerts recorded for a run (backend/health), each in full
with its fix for one run. `submit` checks CONFIG.yaml as "Run this YAML as it is" does on the page (every key kept:
the form's fields, the rest in Other keys), then starts the run here, queues it behind the
run training here, or submits it to Slurm, and prints the run's id on stdout (what it did,
and every finding, go to stderr). A local run is placed as the app places it: while an app
keeps this runs directory's queue, it is queued with the GPUs it asks for and that app starts
it on its node within 2 s (the app's own node, and the app is then the trainer's parent: it
samples and watches it, and sees its end at once); with no app, `submit` finds the node as the
app does (the GPUs it sees under --sysfs-root, else --cpu-slots N) and starts the run on its
own free GPUs, recorded in its launch.json, or queues it behind the runs holding them. `status` lists the runs (or shows one) with Slurm's word on
each job that waits or runs. `stop` stops a run here, cancels a queued one, or asks a Slurm
job to save and stop (cancelled 20 s later if it has not).

Exit status: 0 done; 1 refused (a finding says why, with its fix); 2 bad arguments or an
unreadable file, or no such run. Messages in English, or Chinese with --lang zh-CN (or a
LANG starting with zh).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from backend.findings import Finding, has_problems
from backend.i18n import translate
from backend.runs.gpu_slots import MAX_CPU_SLOTS

if TYPE_CHECKING:
    from backend.service import RocBoard

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
CONFIG_MAX_BYTES = 1024 * 1024  # a training YAML is a few kB
STOP_WAIT_S = 45.0  # a Slurm job asked to stop is cancelled after 20 s; this covers both


def _locale(value: str | None) -> str:
    if value:
        return "zh-CN" if value.lower().startswith("zh") else "en"
    return "zh-CN" if os.environ.get("LANG", "").lower().startswith("zh") else "en"


def _finding_line(finding: Finding, locale: str) -> str:
    problem, fix = finding.text(locale)
    label = translate("word.problem" if finding.severity == "problem" else "word.warning", locale)
    return f"{label}: {finding.key}: {problem} {translate('word.fix', locale)}: {fix}"


def _board(runs_dir: Path):
    from backend.service import RocBoard

    return RocBoard(runs_dir)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="the runs directory the page uses (default: runs)")
    parser.add_argument("--lang", help="en or zh-CN (default: from LANG)")


def _read_config(path: Path, err: TextIO) -> str | None:
    """The training YAML's text (at most CONFIG_MAX_BYTES), or None with the reason on `err`."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(CONFIG_MAX_BYTES + 1)
        if len(data) > CONFIG_MAX_BYTES:
            raise ValueError(f"larger than {CONFIG_MAX_BYTES // 1024} KiB: not a training YAML")
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        err.write(f"error: cannot read {path}: {error}\n")
        return None


def _preset_form(board: RocBoard, preset_id: str, err: TextIO) -> tuple[str, Any, dict[str, Any]] | None:
    """(preset id, preset, the form a YAML is loaded over: the schema's defaults and the
    preset's values) for `preset_id` (empty: the schema's default preset), or None with the
    reason on `err`."""
    from backend.config import schema

    preset_id = preset_id or schema.field("preset").default
    preset = board.preset(preset_id)
    if preset is None:
        err.write(f"error: no preset {preset_id!r}; choose one of {', '.join(board.presets)}\n")
        return None
    return preset_id, preset, {**schema.form_defaults(), **schema.side_form_defaults(), **board.form_for_preset(preset_id), "preset": preset_id}


def _options(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.Namespace | None, int]:
    """(the options, 0), or (None, the exit status) after --help or bad arguments (argparse
    has said why)."""
    try:
        return parser.parse_args(argv), EXIT_OK
    except SystemExit as exit_:
        return None, EXIT_USAGE if exit_.code else EXIT_OK


# --- submit -----------------------------------------------------------------------------------


def submit_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py submit", description="Check a LLaMA-Factory YAML as the page does and run it here, queue it, or submit it to Slurm.")
    parser.add_argument("config", type=Path, help="the LLaMA-Factory training YAML")
    parser.add_argument("--preset", default="", help="hardware preset id (file stem in presets/), e.g. mi300x (default: the form's)")
    parser.add_argument("--name", default="", help="the run's name (default: the YAML's run_name, else the model's)")
    node = parser.add_argument_group("this machine's GPUs (as `python app.py` finds them; used only while no app keeps the queue)")
    node.add_argument("--gpus", default="", metavar="LIST", help="the GPUs the run asks for by index, e.g. 0,1 (the form's \"GPUs on this machine\"; default: free ones the node picks)")
    node.add_argument("--sysfs-root", type=Path, default=Path("/sys"), help="read the GPUs from this tree instead of /sys (a fake tree for demos and tests)")
    node.add_argument("--cpu-slots", type=int, default=1, metavar="N", help="on a machine without GPUs, how many local runs train at once (1 to 64; default 1)")
    slurm = parser.add_argument_group("Slurm")
    slurm.add_argument("--slurm", action="store_true", help="submit a Slurm batch job instead of running here")
    slurm.add_argument("--partition", default="", help="partition (default: the cluster's)")
    slurm.add_argument("--account", default="", help="account (default: yours)")
    slurm.add_argument("--nodes", default="1", help="nodes (default: 1)")
    slurm.add_argument("--gpus-per-node", default=None, help="GPUs per node (default: the preset's GPUs per node; 0 on the CPU demo)")
    slurm.add_argument("--cpus-per-task", default="0", help="CPUs per node (default: Slurm's)")
    slurm.add_argument("--mem", default="", help="memory per node, e.g. 64G (default: the partition's)")
    slurm.add_argument("--time", default="", help="time limit: HH:MM:SS or D-HH:MM:SS (default: the partition's)")
    slurm.add_argument("--sbatch", action="append", default=[], metavar="LINE", help="one more #SBATCH option, e.g. --sbatch=--qos=high (repeatable)")
    _common(parser)
    return parser


def submit_main(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    options, status = _options(submit_parser(), argv)
    if options is None:
        return status
    locale = _locale(options.lang)
    if not 1 <= options.cpu_slots <= MAX_CPU_SLOTS:
        err.write(f"error: --cpu-slots takes 1 to {MAX_CPU_SLOTS}; got {options.cpu_slots}\n")
        return EXIT_USAGE
    text = _read_config(options.config, err)
    if text is None:
        return EXIT_USAGE
    board = _board(options.runs_dir)
    started = _preset_form(board, options.preset, err)
    if started is None:
        return EXIT_USAGE
    preset_id, preset, current = started
    if options.slurm:
        gpus = options.gpus_per_node if options.gpus_per_node is not None else (0 if preset.use_cpu else preset.devices_per_node)
        current.update(
            run_on="slurm",
            slurm_partition=options.partition,
            slurm_account=options.account,
            slurm_nodes=options.nodes,
            slurm_gpus_per_node=gpus,
            slurm_cpus_per_task=options.cpus_per_task,
            slurm_mem=options.mem,
            slurm_time=options.time,
            slurm_extra="\n".join(options.sbatch),
        )
    load = board.load_into_form(text, preset_id, current)
    values = dict(load.values)
    if options.gpus:
        values["local_gpus"] = options.gpus  # checked by start() as the form's field is
    if options.name:
        values["run_name"] = options.name
    findings = list(load.findings)
    if not load.loaded or has_problems(findings):
        for finding in findings:
            err.write(_finding_line(finding, locale) + "\n")
        err.write(f"refused: {options.config} has problems; nothing was created\n")
        return EXIT_REFUSED
    from backend.runs.gpu_slots import node_gpus

    # The node as the app finds it (docs/runs.md "Side by side"); while an app keeps the queue,
    # the run only joins it and that app starts it on its own node (it is the app's child).
    board.set_node(node_gpus(options.sysfs_root, cpu_slot_count=options.cpu_slots))
    app_keeps_queue = board.run_manager.queue_keeper_alive()
    result = board.start(values, start_here=not app_keeps_queue)
    for finding in result.findings:
        err.write(_finding_line(finding, locale) + "\n")
    if result.run is None:
        err.write("refused: nothing was created\n")
        return EXIT_REFUSED
    run = result.run
    out.write(run.id + "\n")
    if run.state == "queued":
        position = board.run_manager.queue.position(run.id)
        if app_keeps_queue:
            err.write(f"queued: number {position} in line on this machine; the RocBoard app keeping this runs directory starts it when its GPUs are free\n")
        else:
            err.write(f"queued: number {position} in line on this machine; it starts when the GPUs it needs are free\n")
            err.write("note: no RocBoard app is running on this runs directory: the queue moves on while `python app.py` runs\n")
    elif run.executor == "slurm":
        err.write(f"submitted: Slurm job {run.job_id} ({translate('state.' + run.state, locale)})\n")
    else:
        gpus = board.run_manager.gpus_of(run.id)
        on = f" on {translate('runs.gpus', locale, gpus=','.join(map(str, gpus)))}" if gpus is not None else ""
        err.write(f"started: {translate('state.' + run.state, locale)} here{on} (pid {run.pid})\n")
    return EXIT_OK


# --- status -----------------------------------------------------------------------------------


def status_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py status", description="The runs (or one run): state, step, last loss, where it runs, Slurm's word on its job.")
    parser.add_argument("run_id", nargs="?", help="one run's id (default: every run)")
    parser.add_argument("--json", action="store_true", help="machine-readable")
    parser.add_argument("--sweep", default="", metavar="ID", help="one sweep's runs, ranked (backend/sweep)")
    parser.add_argument("--metric", default="", help="with --sweep: what ranks them (default: the sweep's own)")
    _common(parser)
    return parser


def run_status(board, run_id: str, locale: str = "en") -> dict[str, Any]:
    """One run as `status` shows it (and --json prints it)."""
    from backend.runs.history import summarize_runs
    from backend.view import slurm_reason_text, stop_reason_text

    state = board.run_manager.slurm.refresh(board.run_manager.refresh(run_id), ask_now=True)
    summary = next((s for s in summarize_runs(board.store) if s.id == run_id), None)
    status: dict[str, Any] = {
        "id": state.id,
        "name": state.name,
        "kind": state.kind,
        "state": state.state,
        "where": state.executor,
        "step": summary.step if summary else None,
        "total_steps": summary.total_steps if summary else None,
        "last_loss": summary.last_loss if summary else None,
        "exit_code": state.exit_code,
        "stop_reason": stop_reason_text(state, locale) if state.stop_reason else "",
        "created": state.created,
    }
    # The GPUs' health alerts recorded in the run's folder (backend/health), in `locale`.
    from backend.health.words import status_lines, status_mark

    run_dir = board.store.run_dir(run_id)
    status["health_alerts"] = status_lines(run_dir, locale)
    status["health_text"] = status_mark(run_dir, locale)
    if state.state == "queued":
        status["queue_position"] = board.run_manager.queue.position(run_id)
    gpus = board.run_manager.gpus_of(run_id) if state.local else None
    if gpus is not None:  # given side by side (backend/runs/gpu_slots.py); kept after its end
        status["gpus"] = list(gpus)
    if state.executor == "slurm":
        status.update(
            job_id=state.job_id,
            slurm_state=state.slurm_state,
            slurm_reason=state.slurm_reason,
            slurm_reason_text=slurm_reason_text(state.slurm_reason, locale).replace("`", "") if state.state == "pending" else "",
            slurm_nodes=state.slurm_nodes,
        )
    return status


def _status_line(status: dict[str, Any], locale: str) -> str:
    steps = "" if status["step"] is None else f"step {status['step']}" + (f"/{status['total_steps']}" if status["total_steps"] else "")
    loss = "" if status["last_loss"] is None else f"loss {status['last_loss']:.4g}"
    where = translate("where.local", locale)
    if status["where"] == "slurm":
        where = translate("where.slurm", locale, job=status.get("job_id") or "?")
        if status.get("slurm_state"):
            where += f" {status['slurm_state']}"
    parts = [status["id"], translate(f"state.{status['state']}", locale), where, steps, loss]
    if status.get("queue_position"):
        parts.append(f"#{status['queue_position']} in the queue")
    if status.get("gpus"):
        parts.append(translate("runs.gpus", locale, gpus=",".join(str(g) for g in status["gpus"])))
    if status.get("slurm_reason_text"):
        parts.append(status["slurm_reason_text"])
    if status["state"] in ("failed", "stopped") and status["stop_reason"]:
        parts.append(status["stop_reason"])
    if status.get("health_text"):
        parts.append(status["health_text"])
    return "  ".join(part for part in parts if part)


def status_main(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    options, status = _options(status_parser(), argv)
    if options is None:
        return status
    locale = _locale(options.lang)
    if options.sweep:
        from backend.sweep.status import sweep_status

        return sweep_status(options.runs_dir, options.sweep, options.metric, options.json, locale, out, err)
    from backend.runs import RunNotFound

    board = _board(options.runs_dir)
    ids = [options.run_id] if options.run_id else [state.id for state in board.store.list()]
    try:
        statuses = [run_status(board, run_id, locale) for run_id in ids]
    except RunNotFound:
        err.write(f"error: no run {options.run_id!r} in {board.store.root}\n")
        return EXIT_USAGE
    problem = board.run_manager.slurm.problem()
    if options.json:
        out.write(json.dumps(statuses[0] if options.run_id else statuses, indent=2, ensure_ascii=False) + "\n")
    else:
        out.writelines(_status_line(status, locale) + "\n" for status in statuses)
        if options.run_id:  # one run: each health alert in full, with its fix
            out.writelines(f"  ⚠ {alert['text']}\n    {alert['fix']}\n" for alert in statuses[0]["health_alerts"])
    if problem is not None:
        err.write(f"warning: Slurm did not answer ({problem.detail}): Slurm runs show what it said last\n")
    return EXIT_OK


# --- stop ---------------------------------------------------------------------------------------


def stop_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py stop", description="Stop a run (it saves, as the page's Stop), or cancel a queued one.")
    parser.add_argument("run_id")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for a Slurm job to end")
    _common(parser)
    return parser


def stop_main(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    options, status = _options(stop_parser(), argv)
    if options is None:
        return status
    locale = _locale(options.lang)
    from backend.runs import RunNotFound

    board = _board(options.runs_dir)
    try:
        state = board.run_manager.refresh(options.run_id)
    except RunNotFound:
        err.write(f"error: no run {options.run_id!r} in {board.store.root}\n")
        return EXIT_USAGE
    if not state.alive:
        out.write(f"{state.id}  {translate('state.' + state.state, locale)}\n")
        return EXIT_OK
    state = board.stop(state.id)
    if state.executor == "slurm" and state.active and not options.no_wait:
        state = board.run_manager.slurm.wait(state.id, STOP_WAIT_S)
    out.write(_status_line(run_status(board, state.id, locale), locale) + "\n")
    return EXIT_OK if not state.active or options.no_wait else EXIT_REFUSED


__all__ = ["run_status", "status_main", "stop_main", "submit_main"]
