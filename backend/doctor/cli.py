"""`python app.py doctor [--json] [--lang zh-CN]` (also `python -m backend.doctor.cli`): is this machine ready
to fine-tune on its AMD GPU? One line per check: verdict, what was seen, and the fix.

Exit status: 0 when nothing would break a run, 1 when a check found a problem (the cluster's
too, where Slurm is set up here: `sinfo`, munge, the runs folder `--runs-dir` on the nodes). A CPU-only
machine exits 0: it runs the CPU demo, and the checks say what a GPU run would need.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from backend.doctor import Check, blocking_problems, facts_to_json, gather_facts, run_checks
from backend.i18n import DEFAULT_LOCALE, LOCALES, localized, translate

MARKS = {"ok": "ok", "warning": "WARN", "problem": "PROBLEM"}  # fixed marks: scripts grep them


def format_check(check: Check, locale: str = DEFAULT_LOCALE) -> str:
    """One check's line in `locale` (its words are messages; English by default)."""
    line = f"[{MARKS[check.verdict]:>7}] {localized(check.name, locale)}: {localized(check.saw, locale)}"
    if check.fix and check.verdict != "ok":
        line += "\n          " + translate("doctor.cli.fix", locale, fix=localized(check.fix, locale))
    return line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py doctor", description="Check this machine for ROCm fine-tuning.")
    parser.add_argument("--json", action="store_true", help="print one JSON object: checks, blocking problems, facts")
    parser.add_argument("--lang", choices=LOCALES, default=DEFAULT_LOCALE, help="the language of the report (default: en)")
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), metavar="DIR", help="the runs folder whose sharing with the Slurm nodes is checked, where Slurm is set up (default: runs)")
    parser.add_argument("--sysfs-root", type=Path, default=Path("/sys"), metavar="DIR", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not args.json:
        print(translate("doctor.cli.checking", args.lang), file=sys.stderr, flush=True)
    facts = gather_facts(sysfs_root=args.sysfs_root, runs_dir=args.runs_dir)
    checks = run_checks(facts)
    blocking = blocking_problems(checks, slurm=True)  # here the cluster's problems count too
    if args.json:
        print(
            json.dumps(
                {
                    "checks": [asdict(c) for c in checks],
                    "blocking": [c.name for c in blocking],
                    "facts": facts_to_json(facts),
                },
                indent=2,
            )
        )
    else:
        for check in checks:
            print(format_check(check, args.lang))
        if blocking:
            print("\n" + translate("doctor.blocking", args.lang, count=len(blocking)))
        else:
            print("\n" + translate("doctor.nothing_blocks", args.lang))
    return 1 if blocking else 0


if __name__ == "__main__":
    sys.exit(main())
