"""`python app.py validate`: the validation path from the command line (docs/validate.md).

    python app.py validate [--preset ID] [--model PATH] [--dataset-dir D --dataset N]
        [--gpus N] [--rungs one_gpu,n_gpus,fault_drill] [--drill-step S] [--tolerance T]
        [--max-steps M] [--nodes N --partition P] [--compare REPORT_ID_OR_FILE] [--runs-dir DIR]
        [--lang zh-CN]

Prints each rung's progress and verdict, the report's path, and (with --compare) what moved
since the earlier report. Exit status: 0 every rung passed (or was skipped), 1 a rung failed
or was stopped, 2 bad input (said in the chosen language; nothing was started).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from backend.i18n import DEFAULT_LOCALE, LOCALES, render_message, translate
from backend.validate.curves import DEFAULT_TOLERANCE
from backend.validate.path import DEFAULT_RUNGS, PathStatus, RequestError, ValidationRequest, parse_rungs
from backend.validate.report import ReportError, ValidationReport, report_from_json, validation_dir

MAX_COMPARE_FILE_BYTES = 8 * 1024 * 1024


def build_parser() -> argparse.ArgumentParser:
    defaults = ValidationRequest()
    parser = argparse.ArgumentParser(prog="app.py validate", description="Run the validation path: one GPU, N GPUs, a fault drill.")
    parser.add_argument("--preset", default=defaults.preset, help="hardware preset id (default: cpu-demo)")
    parser.add_argument("--model", default="", help="model folder (default: the demo model)")
    parser.add_argument("--dataset-dir", default="", help="folder with dataset_info.json (default: the demo data)")
    parser.add_argument("--dataset", default="", help="dataset name in that folder")
    parser.add_argument("--gpus", type=int, default=defaults.gpus, help="processes of rung 2 and the drill (default: 2)")
    parser.add_argument("--rungs", default=",".join(DEFAULT_RUNGS), help="comma-separated rungs (default: one_gpu,n_gpus,fault_drill)")
    parser.add_argument("--drill-step", type=int, default=defaults.drill_step, help="kill a rank after this step")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="relative loss gap allowed per step (default: 0.02)")
    parser.add_argument("--max-steps", type=int, default=defaults.max_steps, help="steps of each rung's run")
    parser.add_argument("--nodes", type=int, default=defaults.nodes, help="Slurm nodes of the nodes rung, one process each (default: 2)")
    parser.add_argument("--partition", default="", help="Slurm partition of the nodes rung (default: the cluster's)")
    parser.add_argument("--compare", default="", metavar="REPORT_ID_OR_FILE", help="compare the new report with this earlier one")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="the runs folder (default: ./runs)")
    parser.add_argument("--lang", choices=LOCALES, default=DEFAULT_LOCALE, help="the language of the output (default: en)")
    parser.add_argument("--per-device-batch", type=int, default=defaults.per_device_batch, help=argparse.SUPPRESS)
    parser.add_argument("--n-gpus-batch", type=int, default=0, help=argparse.SUPPRESS)  # a deliberately wrong rung 2
    return parser


def _earlier(board_reports: object, runs_dir: Path, what: str) -> ValidationReport:
    """The report to compare with: a kept report's id, or a report file's path."""
    path = Path(what)
    if path.suffix == ".json" or path.is_file():
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_COMPARE_FILE_BYTES + 1)
        except OSError as error:
            from backend.i18n.errors import os_error

            raise ReportError("validate.report.unreadable", id=str(path), error=os_error(error)) from None
        if len(data) > MAX_COMPARE_FILE_BYTES:
            raise ReportError("validate.report.too_large", size=len(data), limit=MAX_COMPARE_FILE_BYTES)
        return report_from_json(data)
    from backend.validate.report import load_report

    return load_report(runs_dir, what)


def drill_save_steps(drill_step: int) -> int:
    """The drill's checkpoint interval for a drill step: about two thirds of it, so the last
    checkpoint before the kill lies a few steps back (10 -> 6: resumed from 6, 7-10 again)."""
    return max(1, drill_step * 2 // 3)


def _say(message_id: str, lang: str, **params: object) -> None:
    print(render_message(message_id, params, lang), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    lang = args.lang
    try:
        rungs = parse_rungs(args.rungs)
    except RequestError as error:
        print(render_message(error.message_id, error.params, lang), file=sys.stderr)
        return 2
    request = ValidationRequest(
        preset=args.preset,
        model=args.model,
        dataset_dir=args.dataset_dir,
        dataset=args.dataset,
        gpus=args.gpus,
        rungs=rungs,
        tolerance=args.tolerance,
        max_steps=args.max_steps,
        drill_step=args.drill_step,
        save_steps=drill_save_steps(args.drill_step),
        per_device_batch=args.per_device_batch,
        n_gpus_batch=args.n_gpus_batch,
        nodes=args.nodes,
        slurm_partition=args.partition,
    )
    from backend.config.presets import load_presets
    from backend.service import RocBoard

    preset = load_presets()[0].get(args.preset)
    sampler = None
    if preset is not None and not preset.use_cpu:
        # The GPUs' VRAM per rung (vram_peak_mib_per_gpu) comes from the run's samples, which
        # the app's sampler writes while a run trains here: the command line runs one too.
        from backend.telemetry.sampler import Sampler

        sampler = Sampler()
        sampler.start()
    board = RocBoard(args.runs_dir, sampler=sampler)
    desk = board.validation
    earlier: ValidationReport | None = None
    try:
        if args.compare:
            earlier = _earlier(desk, board.runs_dir, args.compare)
        desk.check(request)
        # LLaMA-Factory imported once, in the app's warm helper: each rung's pre-launch check
        # (and a one-process rung's trainer) forks from it instead of importing it again
        # (measured: RocBoard's overhead of rungs 2 and 3 from 8-38 s down to about 1 s).
        board.start_helper()
        path_id = desk.start(request)
    except (RequestError, ReportError) as error:
        print(render_message(error.message_id, error.params, lang), file=sys.stderr)
        return 2
    shown: dict[str, str] = {}
    last_progress = ""
    status: PathStatus = desk.status(path_id)
    try:
        while True:
            status = desk.wait(path_id, timeout=0.5)
            for rung, state in status.rungs.items():
                if shown.get(rung) != state and state != "waiting":
                    shown[rung] = state
                    word = translate("validate.cli.running", lang) if state == "running" else translate(f"validate.status.{state}", lang)
                    _say("validate.cli.rung", lang, rung=translate(f"validate.rung.{rung}", lang), status=word)
            progress = render_message(status.progress.message_id, status.progress.params, lang)
            if progress != last_progress and status.progress.message_id != "validate.progress.training":
                last_progress = progress
                print("  " + progress, flush=True)
            if status.done:
                break
    except KeyboardInterrupt:
        desk.stop(path_id)
        status = desk.wait(path_id, timeout=60)
    time.sleep(0)  # the path's thread has saved its report by now (done is set after the save)
    try:
        report = desk.report(path_id)
    except ReportError as error:
        print(render_message(error.message_id, error.params, lang), file=sys.stderr)
        return 1
    from backend.validate.view import comparison_markdown, note_markdown

    for result in report.rungs:
        figures = ", ".join(f"{name}={value}" for name, value in result.figures.items())
        verdict = translate(f"validate.status.{result.status}", lang)
        _say("validate.cli.verdict", lang, rung=translate(f"validate.rung.{result.rung}", lang), status=verdict, runs=", ".join(result.run_ids) or "-", figures=figures or "-")
        for note in result.causes:
            print("    " + note_markdown(note, lang), flush=True)
    _say("validate.cli.report", lang, path=str(validation_dir(board.runs_dir) / f"{report.id}.json"))
    if earlier is not None:
        from backend.validate.report import compare_reports

        print(comparison_markdown(compare_reports(earlier, report), lang), flush=True)
    board.close()
    if sampler is not None:
        sampler.stop()
    return 0 if all(r.status in ("pass", "skipped") for r in report.rungs) and status.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
