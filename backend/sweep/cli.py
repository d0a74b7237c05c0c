"""`python app.py sweep` and `python app.py status --sweep ID`: sweeps for scripts.

    python app.py sweep CONFIG.yaml --vary learning_rate=1e-4,2e-4,5e-4 --vary lora_rank=8,16
                        [--seeds N] [--preset NAME] [--name NAME] [--metric final_loss]
                        [--early-stop K,MARGIN] [--wait] [--dry-run] [--runs-dir runs] [--lang zh-CN]
    python app.py sweep --add-to ID --vary lora_rank=32 [--dry-run]
    python app.py status --sweep ID [--metric M] [--json] [--runs-dir runs]

`sweep` reads CONFIG.yaml as `submit` does (the page's "Run this YAML as it is"), prints each
run's name, values and cost (the VRAM estimate per device, the GPUs it asks for) and the
totals, then, unless --dry-run, queues every run (or none) and prints the sweep's id on
stdout. `sweep --add-to ID` adds values to fields the sweep varies: the new points of its grid
are said with their cost and queued the same way (their ids on stdout). `status --sweep`
prints its runs ranked by the metric, best first.

Exit status: 0 done; 1 refused (the message says why; nothing was queued); 2 bad arguments,
an unreadable file, or no such sweep.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from backend.i18n import Message, translate
from backend.runs_cli import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, _board, _common, _finding_line, _locale, _options, _preset_form, _read_config
from backend.sweep.status import print_view, values_text

if TYPE_CHECKING:
    from backend.sweep.desk import SweepPlan
    from backend.sweep.spec import SweepRefused

GIB = 1024**3
WAIT_INTERVAL_S = 2.0


def sweep_parser() -> argparse.ArgumentParser:
    from backend.sweep.view import DEFAULT_METRIC, METRICS

    parser = argparse.ArgumentParser(prog="app.py sweep", description="Queue one run per point of a grid of values (or per seed) of a LLaMA-Factory YAML.")
    parser.add_argument("config", nargs="?", default=None, help="the LLaMA-Factory training YAML (none with --add-to)")
    parser.add_argument("--add-to", default="", metavar="ID", help="add runs to sweep ID: --vary names a field it varies and the values to add")
    parser.add_argument("--vary", action="append", default=[], metavar="FIELD=V1,V2", help="a form field and its values (up to three --vary)")
    parser.add_argument("--seeds", type=int, default=0, help="N runs per point, seeds base, base+1, ...")
    parser.add_argument("--preset", default="", help="hardware preset id (default: the form's)")
    parser.add_argument("--name", default="", help="the sweep's name, the runs' names start with it (default: the YAML's run_name)")
    parser.add_argument("--metric", default=DEFAULT_METRIC, choices=list(METRICS), help="what ranks the runs")
    parser.add_argument("--early-stop", default="", metavar="K,MARGIN", help="stop a run whose eval loss after K eval points is worse than the median at that step by MARGIN (0.1 = 10%%)")
    parser.add_argument("--wait", action="store_true", help="stay until the last run ends (moving the queue on meanwhile), then print the ranked runs")
    parser.add_argument("--dry-run", action="store_true", help="say the runs and their cost; queue nothing")
    _common(parser)
    return parser


def sweep_main(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    options, status = _options(sweep_parser(), argv)
    if options is None:
        return status
    locale = _locale(options.lang)
    from backend.findings import has_problems
    from backend.sweep.spec import SweepRefused, SweepSpec, parse_vary

    if options.add_to:
        return add_main(options, locale, out, err)
    if options.config is None:
        err.write(translate("sweep.cli.needs-config", locale) + "\n")
        return EXIT_USAGE
    try:
        spec = SweepSpec(tuple(parse_vary(text) for text in options.vary), options.seeds)
        early_stop = parse_early_stop(options.early_stop) if options.early_stop else None
    except SweepRefused as refused:
        return _refused(refused, locale, err)
    if early_stop is not None and not options.wait and not options.dry_run and not _board(options.runs_dir).run_manager.queue_keeper_alive():
        # The rule is applied by the app's queue keeper, or by this command if it stays.
        err.write(translate("sweep.cli.refused", locale, reason=translate("sweep.cli.early-stop-needs-wait", locale)) + "\n")
        return EXIT_REFUSED
    text = _read_config(options.config, err)
    if text is None:
        return EXIT_USAGE
    board = _board(options.runs_dir)
    started = _preset_form(board, options.preset, err)
    if started is None:
        return EXIT_USAGE
    preset_id, _, current = started
    load = board.load_into_form(text, preset_id, current)
    if not load.loaded or has_problems(load.findings):
        for finding in load.findings:
            err.write(_finding_line(finding, locale) + "\n")
        err.write(translate("sweep.cli.refused", locale, reason=translate("sweep.cli.config-problems", locale, path=str(options.config))) + "\n")
        return EXIT_REFUSED
    desk = board.sweeps
    # The runs' names start with the sweep's: --name, else the YAML's run_name, else its file's stem.
    name = options.name or str(load.values.get("run_name") or "") or Path(options.config).stem
    try:
        plan = desk.plan(spec, load.values, name)
    except SweepRefused as refused:
        return _refused(refused, locale, err)
    _print_plan(plan, locale, err)
    if options.dry_run:
        err.write(translate("sweep.cli.dry-run", locale) + "\n")
        return EXIT_OK
    try:
        record = desk.create(spec, load.values, name, options.metric, early_stop=early_stop)
    except SweepRefused as refused:  # SweepStartRefused too: its runs' findings first
        return _refused(refused, locale, err)
    out.write(record.id + "\n")
    err.write(translate("sweep.cli.queued", locale, runs=len(record.runs), id=record.id) + "\n")
    if options.wait:
        board.keep_queue()
        try:
            # Ended once its end is recorded (by this command's queue keeper, or an app's).
            while desk.record(record.id).finished_at is None:
                time.sleep(WAIT_INTERVAL_S)
        except KeyboardInterrupt:
            err.write(translate("sweep.cli.left", locale, id=record.id) + "\n")
            return EXIT_OK
        print_view(desk.view(record.id, options.metric, locale), locale, out)
        return EXIT_OK
    if not board.run_manager.queue_keeper_alive():
        err.write(translate("sweep.cli.no-keeper", locale) + "\n")
    return EXIT_OK


def add_main(options: argparse.Namespace, locale: str, out: TextIO, err: TextIO) -> int:
    """`sweep --add-to ID --vary FIELD=V1,V2`: the runs the added values make, each with its
    cost, then (unless --dry-run) started like the sweep's others; on stdout the new runs' ids."""
    from backend.sweep.record import SweepNotFound
    from backend.sweep.spec import SweepRefused, parse_vary

    if options.config is not None or options.seeds or options.early_stop or options.preset or options.name:
        err.write(translate("sweep.cli.add-options", locale) + "\n")
        return EXIT_USAGE
    board = _board(options.runs_dir)
    desk = board.sweeps
    try:
        axes = tuple(parse_vary(text) for text in options.vary)
        plan = desk.plan_added(options.add_to, axes)
    except SweepNotFound:
        err.write(translate("sweep.cli.not-found", locale, id=str(options.add_to)[:80]) + "\n")
        return EXIT_USAGE
    except SweepRefused as refused:
        return _refused(refused, locale, err)
    _print_plan(plan, locale, err)
    if options.dry_run:
        err.write(translate("sweep.cli.dry-run", locale) + "\n")
        return EXIT_OK
    try:
        before = len(desk.record(options.add_to).runs)
        record = desk.add_runs(options.add_to, axes)
    except SweepNotFound:
        err.write(translate("sweep.cli.not-found", locale, id=str(options.add_to)[:80]) + "\n")
        return EXIT_USAGE
    except SweepRefused as refused:  # SweepStartRefused too: its runs' findings first
        return _refused(refused, locale, err)
    added = record.runs[before:]
    for member in added:
        out.write(member.run_id + "\n")
    err.write(translate("sweep.cli.added", locale, runs=len(added), id=record.id) + "\n")
    if not board.run_manager.queue_keeper_alive():
        err.write(translate("sweep.cli.no-keeper", locale) + "\n")
    return EXIT_OK


def _print_plan(plan: SweepPlan, locale: str, err: TextIO) -> None:
    """Each planned run with its values and cost, then the totals (a new sweep's or added runs')."""
    for cost in plan.costs:
        err.write(translate("sweep.cli.run", locale, name=cost.name, values=values_text(cost.values), gib=f"{cost.device_bytes / GIB:.1f}", gpus=cost.gpus) + "\n")
    err.write(translate("sweep.cli.total", locale, runs=len(plan.runs), gpus=plan.total_gpus, gib=f"{plan.total_device_bytes / GIB:.1f}") + "\n")


def _refused(refused: SweepRefused, locale: str, err: TextIO) -> int:
    """Says why nothing was made (a refused run's findings first, when a Start refused one)."""
    from backend.sweep.desk import SweepStartRefused

    for finding in refused.findings if isinstance(refused, SweepStartRefused) else ():
        err.write(_finding_line(finding, locale) + "\n")
    err.write(translate("sweep.cli.refused", locale, reason=refused.message.text(locale)) + "\n")
    return EXIT_REFUSED


def parse_early_stop(text: str) -> tuple[int, float]:
    """`3,0.1` as (3, 0.1): SweepRefused for anything else (the bounds are the desk's)."""
    from backend.config import shown
    from backend.sweep.desk import EARLY_STOP_MAX_EVALS, EARLY_STOP_MAX_MARGIN
    from backend.sweep.spec import SweepRefused

    after, _, margin = str(text)[:64].partition(",")
    try:
        parsed = (int(after), float(margin))
    except ValueError:
        parsed = None
    if parsed is None or not (1 <= parsed[0] <= EARLY_STOP_MAX_EVALS and 0 <= parsed[1] <= EARLY_STOP_MAX_MARGIN):
        raise SweepRefused(Message("sweep.bad-early-stop", after=shown(after), margin=shown(margin), max_evals=EARLY_STOP_MAX_EVALS, max_margin=EARLY_STOP_MAX_MARGIN))
    return parsed


def main(argv: list[str]) -> int:
    return sweep_main(argv)


__all__ = ["add_main", "main", "parse_early_stop", "sweep_main", "sweep_parser"]
