"""`python app.py doctor [--json]` (also `python -m backend.doctor_cli`): is this machine ready
to fine-tune on its AMD GPU? One line per check: verdict, what was seen, and the fix.

Exit status: 0 when nothing would break a run, 1 when a check found a problem. A CPU-only
machine exits 0: it runs the CPU demo, and the checks say what a GPU run would need.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from backend.doctor import Check, blocking_problems, facts_to_json, gather_facts, run_checks

MARKS = {"ok": "ok", "warning": "WARN", "problem": "PROBLEM"}


def format_check(check: Check) -> str:
    line = f"[{MARKS[check.verdict]:>7}] {check.name}: {check.saw}"
    if check.fix and check.verdict != "ok":
        line += f"\n          fix: {check.fix}"
    return line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="app.py doctor", description="Check this machine for ROCm fine-tuning.")
    parser.add_argument("--json", action="store_true", help="print one JSON object: checks, blocking problems, facts")
    parser.add_argument("--sysfs-root", type=Path, default=Path("/sys"), metavar="DIR", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if not args.json:
        print("Checking this machine (importing torch in a subprocess takes a few seconds)...", file=sys.stderr, flush=True)
    facts = gather_facts(sysfs_root=args.sysfs_root)
    checks = run_checks(facts)
    blocking = blocking_problems(checks)
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
            print(format_check(check))
        if blocking:
            print(f"\n{len(blocking)} problem(s) would break a GPU run: fix them first.")
        else:
            print("\nNothing blocks a run here.")
    return 1 if blocking else 0


if __name__ == "__main__":
    sys.exit(main())
