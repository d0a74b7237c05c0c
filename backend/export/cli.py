"""python app.py export RUN_ID --to DIR [--gguf f16|q8_0] [--checkpoint N] [--shard-gb N]
[--device cpu|auto] [--overwrite] [--confirm-replace NAME] [--runs-dir DIR]

Merges a run's adapter into its base model, as the Export tab does, for scripts. Progress lines
go to stderr, the result folder to stdout. Exit status: 0 done, 2 refused (the finding, in
English, on stderr), 1 failed (the export's finding), 130 interrupted (nothing kept).

The folder may be anywhere the page's rules allow outside its roots: the command line's user
is the machine's own, who may write where they like without RocBoard (no --export-root here).
Everything else is the page's own check (backend/export/target.py::check_target, called by both):
a full path; no link as the folder, nor on the way below the home or an export root; never `/`,
the home, the base model's, the run's or the runs folder, RocBoard's own folder, its Python
environment or a hidden folder of the home (no flag unlocks these); an existing non-empty
folder replaced only with --overwrite, and one holding files no export wrote only with
--confirm-replace NAME (its name; implies --overwrite); the old one replaced only once the new
export is complete.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from backend.export.job import ExportJob
from backend.export.merge import DEVICES, SHARD_GB_RANGE, ExportRequest, plan_export
from backend.export.size import size_text
from backend.runs import RunStore

WAIT_S = 1.0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="app.py export", description="Merge a run's LoRA adapter into its base model and write it to a folder.")
    parser.add_argument("run_id", help="the run (its folder name under the runs dir)")
    parser.add_argument("--to", required=True, metavar="DIR", help="the folder to write (a full path; made if missing)")
    parser.add_argument("--gguf", choices=["f16", "q8_0"], default=None, help="also write a GGUF file (needs `make gguf`)")
    parser.add_argument("--checkpoint", type=int, default=None, metavar="N", help="merge checkpoint-N instead of the final adapter")
    parser.add_argument("--shard-gb", type=int, default=5, metavar="N", help=f"largest safetensors shard in GB ({SHARD_GB_RANGE[0]}..{SHARD_GB_RANGE[1]}, default 5)")
    parser.add_argument("--device", choices=DEVICES, default="cpu", help="merge on the cpu (default) or auto (a GPU when there is one)")
    parser.add_argument("--overwrite", action="store_true", help="replace DIR if it exists and holds an earlier export")
    parser.add_argument(
        "--confirm-replace",
        default="",
        metavar="NAME",
        help="replace DIR though it holds files no export wrote (they are deleted): NAME is DIR's own name; implies --overwrite",
    )
    parser.add_argument("--runs-dir", default="runs", help="where runs are kept (default runs)")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    request = ExportRequest(
        run_id=args.run_id,
        target=args.to,
        checkpoint=f"checkpoint-{args.checkpoint}" if args.checkpoint is not None else "",
        shard_gb=args.shard_gb,
        device=args.device,
        gguf=args.gguf or "none",
        overwrite=args.overwrite,
        confirm=args.confirm_replace,
    )
    store = RunStore(Path(args.runs_dir))
    plan, findings = plan_export(store, request, None)
    if plan is None or findings:
        for finding in findings:
            print(f"refused: {finding.line()}", file=sys.stderr)
        return 2
    print(f"export: {plan.target}: needs about {size_text(plan.needed_disk)}, {size_text(plan.free_disk)} free", file=sys.stderr)
    job = ExportJob(plan, None, on_line=lambda phase: print(f"export: {phase}", file=sys.stderr, flush=True))
    job.start()
    try:
        while not job.join(WAIT_S):
            pass
    except KeyboardInterrupt:
        job.cancel()
        job.join(60.0)
        print("export: cancelled; nothing kept", file=sys.stderr)
        return 130
    progress = job.progress
    if progress.phase != "done" or progress.result is None:
        for finding in progress.findings:
            print(f"failed: {finding.line()}", file=sys.stderr)
        return 1
    result = progress.result
    for name, size in result.files:
        print(f"export: wrote {name} ({size_text(size)})", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"export: done in {result.seconds:.1f} s, {size_text(result.total_bytes)}", file=sys.stderr)
    print(result.target)
    return 0
